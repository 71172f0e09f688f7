"""CPU per request of a gateway evaluating a shadow quota set the size of its enforced set, against one without, and
one without against main's code (issue 36: ≤ 1.3x with the shadow; unchanged without one).

    .venv/bin/python bench/shadow_cpu.py [--requests 4000] [--rounds 3] [--chunk 200] [--entities 200] \
        [--gateway-src DIR] [--out FILE]

Gateway processes, each with the usage event log on and an enforced set of ``--entities`` client-id entities
(producer_byte_rate, consumer_byte_rate and request_percentage each; the bench's own client id among them with a
producer_byte_rate of 1 GB/s: metered on every request, never throttling):

* ``no shadow``: this tree, no shadow set;
* ``shadow``: this tree, a shadow set started before it (``ShadowStore.start_shadow``) that changes every key of the
  enforced set (values x 0.9, still never throttling): the shadow's managers meter every request too, and the event
  log writes the shadow columns;
* ``main``: ``--gateway-src`` (``git archive main src | tar -x -C /tmp/main`` then ``--gateway-src /tmp/main/src``),
  no shadow, its store made by that tree's own code.

The load is bench/gateway_cpu.py's one-at-a-time load (kafka-python, single-message 1 KB Produce requests, each
awaited) run on every gateway at once, interleaved in chunks of ``--chunk`` so that every figure spans the same
minutes; CPU is every thread of the gateway process (``/proc/<pid>/task/*/schedstat``). Every round starts fresh
processes; ratios are taken round by round and the median is reported.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from contextlib import ExitStack
from pathlib import Path

from gateway_cpu import CLIENT_ID, QUOTA_BYTES_S, Target, create_topic, interleaved

from quotaflow.store import open_store
from quotaflow.testing.gateway_process import GatewayProcess
from quotaflow.testing.tansu import Tansu

_SEED = """
import sys
from quotaflow.core.entities import QuotaEntity
from quotaflow.store import open_store
path, n, client, rate = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
changes = [(QuotaEntity(client_id=f"tenant-{i}"), {"producer_byte_rate": 1e6 + i, "consumer_byte_rate": 2e6 + i,
                                                   "request_percentage": 50.0}) for i in range(n - 1)]
changes.append((QuotaEntity(client_id=client), {"producer_byte_rate": rate}))
with open_store(path) as store:
    store.alter(changes)
"""


def seed(store: Path, entities: int, src: str | None) -> None:
    """The enforced set, written by the code of the tree that will read it (main's store code for main)."""
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = src
    subprocess.run([sys.executable, "-c", _SEED, str(store), str(entities), CLIENT_ID, str(QUOTA_BYTES_S)],
                   check=True, env=env)


def start_shadow(store: Path) -> int:
    """A shadow set changing every key of the enforced set (x 0.9: still never throttling)."""
    with open_store(store) as s:
        enforced = s.snapshot().entities
        changes = [(entity, {key: value * 0.9 for key, value in values.items()}) for entity, values in enforced.items()]
        return s.start_shadow("bench", "bench", changes).id  # type: ignore[attr-defined]


def gateway(broker: Tansu, work: Path, name: str, entities: int, src: str | None,
            shadow: bool) -> tuple[GatewayProcess, Target]:
    gw_dir = work / f"{name.replace(' ', '-')}-{uuid.uuid4().hex[:6]}"
    gw_dir.mkdir()
    store = gw_dir / "quotas.db"
    seed(store, entities, src)
    if shadow:
        start_shadow(store)
    before = os.environ.get("PYTHONPATH")
    if src is not None:
        os.environ["PYTHONPATH"] = src
    try:
        gw = GatewayProcess(broker.bootstrap, store, gw_dir, event_log=gw_dir / "events", metrics=True).start()
    finally:
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before
    assert gw.pid is not None and broker.pid is not None
    return gw, Target(name, False, gw.bootstrap, gw.pid, broker.pid)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=4000, help="one-at-a-time Produce requests per gateway a round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--chunk", type=int, default=200)
    ap.add_argument("--entities", type=int, default=200, help="enforced entities (the shadow changes every key)")
    ap.add_argument("--gateway-src", default=None, help="also run main's gateway from this source tree")
    ap.add_argument("--out", type=Path, default=None, help="write the markdown report here too")
    args = ap.parse_args()
    load_before = os.getloadavg()
    started = time.time()
    paths: list[tuple[str, str | None, bool]] = [("no shadow", None, False), ("shadow", None, True)]
    if args.gateway_src:
        paths.append(("main", args.gateway_src, False))
    per: dict[str, list[float]] = {name: [] for name, _, _ in paths}
    ratios: dict[str, list[float]] = {"shadow / no shadow": [], "no shadow / main": []}
    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="quotaflow-shadow-cpu-")))
        broker = stack.enter_context(Tansu())
        for r in range(args.rounds):
            running: list[GatewayProcess] = []
            try:
                targets = []
                for name, src, shadow in (paths if r % 2 == 0 else paths[::-1]):
                    gw, target = gateway(broker, work, name, args.entities, src, shadow)
                    running.append(gw)
                    create_topic(target, work / "unused-ca.pem")
                    targets.append(target)
                figures = interleaved(targets, work / "unused-ca.pem", args.requests, args.chunk)
                for gw, (name, _, shadow) in zip(running, paths if r % 2 == 0 else paths[::-1], strict=True):
                    with urllib.request.urlopen(f"{gw.http_url}/metrics", timeout=30) as response:
                        evaluated = b"kafka_server_shadow_produce_byte_rate{" in response.read()
                    if evaluated != shadow:
                        raise RuntimeError(f"{name}: the gateway {'did not evaluate' if shadow else 'evaluated'} a "
                                           "shadow set (its /metrics)")
            finally:
                for gw in running:
                    gw.stop(30)
            got = {t.name: f[0] for t, f in zip(targets, figures, strict=True)}
            for name, us in got.items():
                per[name].append(us)
            ratios["shadow / no shadow"].append(got["shadow"] / got["no shadow"])
            if "main" in got:
                ratios["no shadow / main"].append(got["no shadow"] / got["main"])
            print(f"round {r + 1}: " + ", ".join(f"{n} {us:.1f} µs" for n, us in got.items()), flush=True)
    load_after = os.getloadavg()
    lines = [
        f"# bench/shadow_cpu.py ({time.strftime('%Y-%m-%d %H:%M', time.gmtime(started))} UTC)",
        "",
        f"Command: `.venv/bin/python bench/shadow_cpu.py --requests {args.requests} --rounds {args.rounds} "
        f"--chunk {args.chunk} --entities {args.entities}"
        + (f" --gateway-src {args.gateway_src}`" if args.gateway_src else "`"),
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; load average "
        f"{load_before[0]:.1f} before, {load_after[0]:.1f} after",
        "",
        "| gateway | CPU µs / request (median of rounds) | rounds |",
        "|---|---:|---|",
        *[f"| {name} | {statistics.median(v):.1f} | {', '.join(f'{x:.1f}' for x in v)} |" for name, v in per.items()],
        "",
        "| ratio | median | rounds |",
        "|---|---:|---|",
        *[f"| {name} | {statistics.median(v):.3f}x | {', '.join(f'{x:.3f}' for x in v)} |"
          for name, v in ratios.items() if v],
    ]
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out is not None:
        args.out.write_text(report)


if __name__ == "__main__":
    main()
