"""Connection decisions A/B in one process: the compiled acceptor loop (``pipeline.connections.decide_all``) against
the per-connection ``AcceptorSimulation`` it replaced, on a generated events directory; checks both agree.

Run (after ``bench/pipeline.py`` generated the events)::

    PYTHONPATH=src .venv/bin/python bench/conn_loop.py /tmp/h10/wa/events-5000000/connections
"""

from __future__ import annotations

import sys
import time

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from quotaflow.engine.conn_acceptor import AddListener, Connect, Event, IpRate, simulate
from quotaflow.engine.connection import ConnectionQuotaConfig, ConnectionQuotas
from quotaflow.pipeline.connections import decide_all

Row = tuple[int, int, str]


def per_connection(table: pa.Table, config: ConnectionQuotaConfig, ip_rates: dict[str | None, int]) -> list[Row]:
    """The previous path: every broker through AcceptorSimulation, one Python object per connection."""
    out: list[Row] = []
    for broker in sorted(pc.unique(table.column("broker")).to_pylist()):
        t = table.filter(pc.equal(table.column("broker"), broker))
        t = t.sort_by([("ts_ms", "ascending"), ("seq", "ascending")])
        ts, ls, ips = (t.column(c).to_pylist() for c in ("ts_ms", "listener", "client_ip"))
        events: list[Event] = [AddListener(ts[0], name) for name in sorted(set(ls))]
        events += [IpRate(ts[0], ip, r) for ip, r in sorted(ip_rates.items(), key=lambda kv: (kv[0] is not None, kv))]
        first = len(events)
        events += [Connect(a, b, c) for a, b, c in zip(ts, ls, ips, strict=True)]
        out += [(o.accept_delay_ms, o.ip_throttle_ms, o.result.value)
                for o in simulate(ConnectionQuotas(config), events)[first:] if o is not None]
    return out


def main() -> None:
    table = ds.dataset(sys.argv[1]).to_table()
    ip_rates: dict[str | None, int] = {None: 20, "10.0.0.7": 5}
    config = ConnectionQuotaConfig(max_connection_creation_rate=50)
    decide_all(table.slice(0, 100), config, ip_rates)  # compile (cached) outside the timing
    for _ in range(2):
        s = time.perf_counter()
        new = decide_all(table, config, ip_rates)
        t_new = time.perf_counter() - s
        s = time.perf_counter()
        old = per_connection(table, config, ip_rates)
        t_old = time.perf_counter() - s
        got = list(zip(*(new.column(c).to_pylist() for c in ("accept_delay_ms", "ip_throttle_ms", "result")),
                       strict=True))
        n = table.num_rows
        print(f"{n} connections: per-connection {t_old:.2f} s ({t_old / n * 1e6:.1f} µs each), loop {t_new:.3f} s "
              f"({t_new / n * 1e6:.2f} µs each), {t_old / t_new:.0f}×, identical={got == old}, "
              f"delayed={sum(1 for g in got if g[0] > 0)}, "
              f"ip_throttled={sum(1 for g in got if g[2] == 'IP_THROTTLED')}")


if __name__ == "__main__":
    main()
