"""Control-plane work at Kafka's scale against the data path: one `quotaflow gateway` process in front of tansu,
100,000 quota entities and 100,000 ACLs in its store, a producer's worst round trip while the control plane works.

    .venv/bin/python bench/control_plane_scale.py [--entities 100000] [--acls 100000] \
        [--before-src /work/main/src --before-python /work/main/.venv/bin/python] \
        [--out bench/results/control_plane_scale.md]

With ``--before-src`` the same probes run first against a gateway from that source tree (its own interpreter), then
against this tree's, so the figures stand side by side with their ratios. The store (SQLite), tansu and the clients
always come from this tree. A kafka-python producer in its own process (its own GIL) sends 100-byte records, acks=1,
one at a time, and logs each round trip with a CLOCK_MONOTONIC stamp; each phase's figure is the worst round trip
from its start to 0.5 s after it ends (the ACL and quota phases: a 3 s window, the store polls every 250 ms):

* idle: nothing but the producer, 3 s;
* resolve: 5 sequential ``GET /resolve?user=..&client-id=..`` on the metrics port (each one's latency too);
* describe-all: one DescribeClientQuotas with an empty filter (every entity) over the wire;
* acl change: one ACL added to the store (as ``kafka-acls --add`` does), picked up by the gateway's ACL poll;
* quota alteration: one AlterClientQuotas of an existing entity through the gateway;
* describe acls (literal) / (any): one DescribeAcls of one topic's literal ACLs, then one of every ACL (ANY), with
  kafka-python's admin client over the wire;
* delete acls: one DeleteAcls of two MATCH filters (two topics' ACLs); delete acls (every, refused): one DeleteAcls
  of every ACL, past Kafka's 10,000-record bound, refused whole (nothing removed);
* enforcement: a second producer (client-id ``cp-victim``, 10 KB records) runs; ``producer_byte_rate=1024`` is set
  on that client-id through the gateway; the time from the alteration's answer to the first produce response that
  carries a throttle (kafka-python's ``throttle-time-max`` > 0), i.e. measured on the data path.

The gateway's CPU seconds (``/proc/<pid>/stat``) over each phase are reported too (the producer's own traffic
included: compare with idle).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from statistics import median
from typing import Any

from quotaflow.admin import Alteration
from quotaflow.admin.wire import WireAdmin
from quotaflow.core.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from quotaflow.core.entities import QuotaEntity
from quotaflow.core.filters import QuotaFilter
from quotaflow.store.migrations import SCHEMA_VERSION
from quotaflow.store.sqlite import SqliteStore
from quotaflow.testing.gateway_process import GatewayProcess
from quotaflow.testing.tansu import Tansu

TOPIC = "cp-rt"
WINDOW_S = 3.0
SETTLE_S = 0.5
CONFIG = ("authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer\n"
          "allow.everyone.if.no.acl.found=true\n")


def tenant_acl(i: int) -> AclBinding:
    return AclBinding(ResourcePattern(ResourceType.TOPIC, f"tenant-{i}.events", PatternType.LITERAL),
                      AccessControlEntry(f"User:tenant-{i % 1000}", "*", AclOperation.WRITE, AclPermissionType.ALLOW))


def set_schema(path: Path, version: int) -> None:
    """Label a store with a schema version (what the gateway under test checks at open)."""
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA user_version = {version}")


def schema_of(python: str, src: str | None) -> int:
    """The store schema version a source tree knows. A store this tree made carries newer tables (shadow quotas,
    schema 4) that an older gateway does not read; labelled with the older version, that gateway opens it."""
    env = dict(os.environ, PYTHONPATH=src) if src else None
    out = subprocess.run([python, "-c", "from quotaflow.store.migrations import SCHEMA_VERSION as v; print(v)"],
                         env=env, capture_output=True, text=True, check=True)
    return int(out.stdout)


def populate(path: Path, entities: int, acls: int) -> None:
    with SqliteStore(path) as store:
        changes: list[Any] = [(QuotaEntity(user=f"u{i}", client_id=f"c{i}"), {"producer_byte_rate": 1e6 + i})
                              for i in range(entities)]
        changes += [(QuotaEntity(user=f"u{i}"), {"consumer_byte_rate": 2e6}) for i in range(0, entities, 10)]
        for start in range(0, len(changes), 20_000):
            store.alter(changes[start:start + 20_000])
        bindings = [tenant_acl(i) for i in range(acls)]
        for start in range(0, len(bindings), 20_000):
            store.add_acls(bindings[start:start + 20_000])


# -- the producer process ------------------------------------------------------------------------------------------

def producer_main(bootstrap: str, out: str, client_id: str, size: int, watch_throttle: bool) -> None:
    """Send until killed; one line per round trip: monotonic ns, round trip µs, throttle seen (0/1)."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, client_id=client_id, acks=1, linger_ms=0,
                             enable_idempotence=False, max_request_size=1 << 20)
    payload = b"x" * size
    producer.send(TOPIC, payload).get(timeout=60)
    with open(out, "w", buffering=1) as f:
        while True:
            t0 = time.monotonic_ns()
            producer.send(TOPIC, payload).get(timeout=60)
            t1 = time.monotonic_ns()
            throttled = 0
            if watch_throttle:
                throttled = int(any((values.get(name) or 0) > 0 for values in producer.metrics().values()
                                    for name in ("throttle-time-max", "produce-throttle-time-max")))
            f.write(f"{t1} {(t1 - t0) // 1000} {throttled}\n")
            if throttled:
                time.sleep(0.2)


class Producer:
    def __init__(self, bootstrap: str, out: Path, client_id: str = "cp-rt", size: int = 100,
                 watch_throttle: bool = False) -> None:
        self.out = out
        self.proc = subprocess.Popen([sys.executable, __file__, "--producer", bootstrap, str(out), client_id,
                                      str(size), "1" if watch_throttle else "0"])
        deadline = time.monotonic() + 60
        while not (out.exists() and out.stat().st_size > 0):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("the producer did not start")
            time.sleep(0.1)

    def rows(self) -> list[tuple[int, int, int]]:
        rows = []
        for line in self.out.read_text().splitlines():
            parts = line.split()
            if len(parts) == 3:
                rows.append((int(parts[0]), int(parts[1]), int(parts[2])))
        return rows

    def window(self, start_ns: int, end_ns: int) -> list[float]:
        """Round trips (ms) of responses that came back within [start, end + settle]."""
        stop = end_ns + int(SETTLE_S * 1e9)
        return [rt / 1000 for t, rt, _ in self.rows() if start_ns <= t <= stop]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- one gateway's run ---------------------------------------------------------------------------------------------

def run(tansu: Tansu, store: Path, work: Path, python: str, src: str | None) -> dict[str, Any]:
    schema = schema_of(python, src)
    set_schema(store, schema)
    config = work / "gateway.properties"
    config.write_text(CONFIG)
    env_before = os.environ.get("PYTHONPATH")
    if src:
        os.environ["PYTHONPATH"] = src
    try:
        gw = GatewayProcess(tansu.bootstrap, store, work / "gw", metrics=True, start_timeout=300,
                            extra_args=("--config", str(config)))
        gw.command = _with_python(gw.command, python)  # type: ignore[method-assign]
        gw.start()
    finally:
        if env_before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = env_before
    out: dict[str, Any] = {}
    producer = Producer(gw.bootstrap, work / "rt.log")
    try:
        assert gw.pid is not None
        time.sleep(2)  # warm

        def phase(name: str, action: Any) -> Any:
            c0, t0 = cpu_s(gw.pid), time.monotonic_ns()  # type: ignore[arg-type]
            result = action()
            t1 = time.monotonic_ns()
            time.sleep(SETTLE_S)
            rts = producer.window(t0, t1)
            ordered = sorted(rts) or [float("nan")]
            out[name] = {"worst_ms": ordered[-1], "median_ms": median(ordered),
                         "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
                         "over_20ms": sum(rt > 20 for rt in rts), "n": len(rts),
                         "cpu_s": cpu_s(gw.pid) - c0, "action_s": (t1 - t0) / 1e9}  # type: ignore[arg-type]
            return result

        phase("idle", lambda: time.sleep(WINDOW_S))
        url = f"{gw.http_url}/resolve?user=u7&client-id=c7"

        def resolves() -> list[float]:
            took = []
            for _ in range(5):
                t = time.perf_counter()
                with urllib.request.urlopen(url, timeout=60) as r:
                    r.read()
                took.append((time.perf_counter() - t) * 1000)
            return took

        out["resolve_each_ms"] = phase("resolve", resolves)

        def describe_all() -> int:
            admin = WireAdmin(gw.bootstrap)
            try:
                return len(admin.describe(QuotaFilter()))
            finally:
                admin.close()

        out["described"] = phase("describe-all", describe_all)

        def acl_change() -> None:
            set_schema(store, SCHEMA_VERSION)  # the gateway checked it at open; this tree's writer checks it now
            with SqliteStore(store) as s:
                s.add_acls([tenant_acl(10_000_000)])
            set_schema(store, schema)
            time.sleep(WINDOW_S)

        phase("acl change", acl_change)

        def alter(entity: QuotaEntity, value: float) -> float:
            admin = WireAdmin(gw.bootstrap)
            try:
                results = admin.alter([Alteration.of(entity, {"producer_byte_rate": value})])
                assert all(r.ok for r in results), results
                return time.monotonic_ns() / 1e9
            finally:
                admin.close()

        def alteration() -> None:
            alter(QuotaEntity(user="u5", client_id="c5"), 123456.0)
            time.sleep(WINDOW_S)

        phase("quota alteration", alteration)

        def acl_admin() -> Any:
            from kafka.admin import KafkaAdminClient

            return KafkaAdminClient(bootstrap_servers=gw.bootstrap, request_timeout_ms=300_000)

        def describe_acls(name: str | None) -> int:
            from kafka.admin import ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType
            from kafka.admin import ResourcePatternFilter as Rpf
            from kafka.admin import ResourceType as Rt

            admin = acl_admin()
            try:
                pattern = (Rpf(Rt.TOPIC, name, ACLResourcePatternType.LITERAL) if name is not None
                           else Rpf(Rt.ANY, None, ACLResourcePatternType.ANY))
                acls, error = admin.describe_acls(ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                                                            pattern))
                assert error is None or error.errno == 0, error
                return len(acls)
            finally:
                admin.close()

        out["acls_literal"] = phase("describe acls (literal)", lambda: describe_acls(tenant_acl(5).pattern.name))
        out["acls_any"] = phase("describe acls (any)", lambda: describe_acls(None))

        def delete_acls(names: list[str | None]) -> list[int]:
            from kafka.admin import ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType
            from kafka.admin import ResourcePatternFilter as Rpf
            from kafka.admin import ResourceType as Rt

            admin = acl_admin()
            try:
                answered = admin.delete_acls([ACLFilter(
                    None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                    Rpf(Rt.TOPIC, name, ACLResourcePatternType.MATCH) if name is not None
                    else Rpf(Rt.ANY, None, ACLResourcePatternType.ANY)) for name in names])
                return [-1 if err is not None and err.errno else len(deleted) for _f, deleted, err in answered]
            finally:
                admin.close()

        out["deleted"] = phase("delete acls", lambda: delete_acls([tenant_acl(7).pattern.name,
                                                                   tenant_acl(8).pattern.name]))
        # every ACL: past Kafka's 10,000-record bound, refused whole (UNKNOWN_SERVER_ERROR), nothing removed
        out["deleted_all"] = phase("delete acls (every, refused)", lambda: delete_acls([None]))

        victim = Producer(gw.bootstrap, work / "victim.log", client_id="cp-victim", size=10_000, watch_throttle=True)
        try:
            time.sleep(1)
            assert not any(th for _, _, th in victim.rows()), "the victim was throttled before any quota"
            acked = alter(QuotaEntity(client_id="cp-victim"), 1024.0)
            deadline = time.monotonic() + 30
            first = None
            while first is None and time.monotonic() < deadline:
                time.sleep(0.05)
                first = next((t / 1e9 for t, _, th in victim.rows() if th), None)
            out["enforcement_s"] = float("nan") if first is None else first - acked
        finally:
            victim.stop()
    finally:
        producer.stop()
        gw.stop()
    return out


def _with_python(command: Any, python: str) -> Any:
    def wrapped() -> list[str]:
        cmd: list[str] = command()
        return [python, *cmd[1:]]
    return wrapped


# -- report ------------------------------------------------------------------------------------------------------

PHASES = ("idle", "resolve", "describe-all", "acl change", "quota alteration", "describe acls (literal)",
          "describe acls (any)", "delete acls", "delete acls (every, refused)")


def report(results: dict[str, dict[str, Any]], args: argparse.Namespace) -> str:
    names = list(results)
    lines = [f"# bench/control_plane_scale.py — {args.entities:,} quota entities, {args.acls:,} ACLs", "",
             f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
             f"load average {os.getloadavg()[0]:.2f} at the end; "
             f"date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
             "", "A producer's round trip through one gateway in front of tansu while the control plane works "
             "(worst and 99th percentile ms, round trips over 20 ms of all in the window, gateway CPU s over "
             "the phase):", ""]
    header = "| phase | " + " | ".join(f"{n}: worst ms | {n}: p99 ms | {n}: > 20 ms / n | {n}: CPU s"
                                       for n in names)
    if len(names) == 2:
        header += " | worst, before / after |"
    lines += [header, "|" + "---|" * (1 + 4 * len(names) + (1 if len(names) == 2 else 0))]
    for phase_name in PHASES:
        row = f"| {phase_name} | "
        cells = []
        for n in names:
            p = results[n][phase_name]
            cells.append(f"{p['worst_ms']:.1f} | {p['p99_ms']:.1f} | {p['over_20ms']} / {p['n']} | {p['cpu_s']:.2f}")
        row += " | ".join(cells)
        if len(names) == 2:
            a, b = (results[n][phase_name]["worst_ms"] for n in names)
            row += f" | {a / b:.1f}x"
        lines.append(row + " |")
    lines.append("")
    for n in names:
        r = results[n]
        each = ", ".join(f"{x:.0f}" for x in r["resolve_each_ms"])
        lines.append(f"* {n}: each /resolve {each} ms; describe-all answered {r['described']:,} entities in "
                     f"{r['describe-all']['action_s']:.1f} s (client decode included); a quota alteration reached "
                     f"enforcement (first throttled produce response) {r['enforcement_s']:.2f} s after it was acked; "
                     f"DescribeAcls answered {r['acls_literal']:,} ACL(s) for one topic in "
                     f"{r['describe acls (literal)']['action_s'] * 1000:.0f} ms and {r['acls_any']:,} for ANY in "
                     f"{r['describe acls (any)']['action_s']:.1f} s (admin client start and decode included); "
                     f"DeleteAcls removed {r['deleted']} in {r['delete acls']['action_s'] * 1000:.0f} ms; "
                     f"the delete of every ACL answered {r['deleted_all']} (-1: refused) in "
                     f"{r['delete acls (every, refused)']['action_s']:.1f} s")
    return "\n".join(lines) + "\n"


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--producer":
        producer_main(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6] == "1")
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entities", type=int, default=100_000)
    parser.add_argument("--acls", type=int, default=100_000)
    parser.add_argument("--before-src", default=None, help="also run a gateway from this source tree first")
    parser.add_argument("--before-python", default=sys.executable, help="the interpreter for --before-src")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="cp-scale-") as tmp, Tansu() as tansu:
        base = Path(tmp) / "base.db"
        t = time.monotonic()
        populate(base, args.entities, args.acls)
        print(f"store populated in {time.monotonic() - t:.0f} s", flush=True)
        runs = [("before", args.before_python, args.before_src)] if args.before_src else []
        runs.append(("after" if args.before_src else "this tree", sys.executable, None))
        for name, python, src in runs:
            work = Path(tmp) / name.replace(" ", "-")
            work.mkdir()
            store = work / "store.db"
            shutil.copy(base, store)
            results[name] = run(tansu, store, work, python, src)
            print(name, results[name], flush=True)
    text = report(results, args)
    print(text)
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
