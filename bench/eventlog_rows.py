"""The event log's cost per request row, before / after (issue 23 item 1): a dict of 19 keys and ``from_pylist``
(``--before``, main before the change) against one tuple in the schema's column order and one Arrow struct array
(this tree), in one process run.

    PYTHONPATH=$PWD/src .venv/bin/python bench/eventlog_rows.py [--rows 50000] [--rounds 5] [--paced-rate 700] \
        [--paced-seconds 10] [--paced-rounds 3] [--before REF] [--out FILE]

The before side is the code of ``--before`` (a git ref of this repository, default the commit the change was made
on), loaded from git: its event log module as a module of its own and its ``Gateway.on_request`` compiled
from its source, so neither is a copy kept by hand. The after side is this tree's ``EventLog`` and what its
connection core does per request (``after_on_request``: ``pending.request_row`` appended to the log's
``request_rows``). Both ``on_request`` run unbound on a stand-in holding only ``_event_log``, with the same
connections and requests (a pool of Produce, Fetch and Metadata requests of several clients, one row each per call).

Figures, per row, each the median over ``--rounds`` (the order of before / after alternates by round):

* loop: CPU time of the calling thread (``time.thread_time_ns``) for ``--rows`` calls of ``on_request``: the row
  built and appended to the log's deque, everything the event loop pays per request. The writer sleeps meanwhile
  (``batch_seconds`` of an hour), so it neither competes nor converts;
* writer: CPU time of the log's writer thread (its ``pthread_getcpuclockid`` clock) for the ``flush`` that follows:
  take the rows, convert them per 4,096, one Parquet file of ``--rows`` rows written and fsynced. Its Parquet part
  is the same code on the same data on both sides;
* writer at the gateway's pace: the same clock with ``--paced-rate`` rows a second arriving for ``--paced-seconds``
  into a log with the gateway's settings (5 s files, adaptive turns), over ``--paced-rounds``: per-turn and per-file
  costs included, on rows and code gone cold between rolls;
* conversion alone, in this thread, on the same rows in batches of 4,096, the best of 7 interleaved runs: before's
  ``from_pylist`` on its dicts; this tree's struct array on its tuples; and ``zip(*rows)`` with one ``pa.array`` per
  column (the other way to convert tuples, not taken: the transpose in Python costs about what it saves);
* container bytes per queued row (``sys.getsizeof``; the values are the same objects either way).

Both logs' files are then read back and compared: same schema, same rows, values and ``seq`` numbers, same number
of files and rows per file (the run fails if they differ), and whether the files are byte for byte the same.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import itertools
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from quotaflow.events import REQUESTS_DIR, dataset_files
from quotaflow.gateway.data.enforcement import RequestDecisions
from quotaflow.gateway.data.pending import Pending, request_row
from quotaflow.gateway.observation import eventlog
from quotaflow.gateway.wire.protocol import RequestHeader

BEFORE = "5f6233ff6ea894868fe6e84d552dd0f7798298b8"  # main when request rows were dicts
EVENTLOG_PATHS = ("src/quotaflow/gateway/observation/eventlog.py", "src/quotaflow/gateway/eventlog.py")  # new, old
SERVER_PATH = "src/quotaflow/gateway/server.py"
ROOT = Path(__file__).resolve().parent.parent


def git_show(ref: str, *paths: str) -> str:
    """The first of ``paths`` that exists at ``ref``."""
    errors = []
    for path in paths:
        done = subprocess.run(["git", "show", f"{ref}:{path}"], cwd=ROOT, capture_output=True, text=True)
        if done.returncode == 0:
            return done.stdout
        errors.append(done.stderr.strip())
    raise SystemExit(f"cannot read {' or '.join(paths)} at {ref} (a git checkout with that commit is needed): "
                     f"{'; '.join(errors)}")


def before_eventlog(ref: str, work: Path) -> ModuleType:
    """``--before``'s eventlog module, imported under a name of its own (it imports this tree's events schema)."""
    path = work / "eventlog_before.py"
    path.write_text(git_show(ref, *EVENTLOG_PATHS))
    spec = importlib.util.spec_from_file_location("eventlog_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["eventlog_before"] = module
    spec.loader.exec_module(module)
    return module


def before_on_request(ref: str) -> Callable[..., None]:
    """``--before``'s ``Gateway.on_request``, compiled from its source (it uses no module globals)."""
    source = git_show(ref, SERVER_PATH)
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == "Gateway":
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "on_request":
                    # its annotations name the server module's imports: kept unevaluated, as there
                    code = "from __future__ import annotations\n" + textwrap.dedent(
                        ast.get_source_segment(source, item) or "")
                    namespace: dict[str, Any] = {}
                    exec(compile(code, f"{ref}:{SERVER_PATH}", "exec"), namespace)
                    fn: Callable[..., None] = namespace["on_request"]
                    return fn
    raise SystemExit(f"no Gateway.on_request in {SERVER_PATH} at {ref}")


def after_on_request(holder: Any, conn: Any, pending: Pending, response_bytes: int, now_ms: int) -> None:
    """This tree's per-request logging, as the connection core does it (from Python here: the core's own call is C)."""
    rows = holder._event_log.request_rows
    rows.append(request_row(conn.broker, conn.listener, conn.principal, conn.client_ip, pending, response_bytes, now_ms,
                            rows.next_seq()))


def traffic(n: int) -> list[tuple[SimpleNamespace, Pending, int]]:
    """A pool of (connection, request, response bytes) the rows are made of: produce (acks), fetch (throttled
    sometimes), metadata, from a few clients on two listeners."""
    conns = [SimpleNamespace(broker=f"gw-node-{i % 3}", listener="PLAINTEXT" if i % 2 else "SASL_SSL",
                             principal=f"User:tenant-{i}", client_ip=f"10.0.0.{i}") for i in range(8)]
    pool = []
    for i in range(n):
        api_key = (0, 1, 3)[i % 3]
        decisions = RequestDecisions(0, 37 * (i % 5 == 0), 0, 37 * (i % 5 == 0)) if api_key == 1 else RequestDecisions()
        pending = Pending(RequestHeader(api_key, (9, 12, 12)[i % 3], i, f"client-{i % 11}", 20), 1024 + i,
                          1_700_000_000_000, thread_ns=30_000 + 7 * i, network_ns=4_000 + 3 * i,
                          acks=1 if api_key == 0 else None, decisions=decisions)
        pool.append((conns[i % len(conns)], pending, 64 + i))
    return pool


def thread_cpu_ns(thread: Any) -> int:
    return time.clock_gettime_ns(time.pthread_getcpuclockid(thread.ident))


def run_side(log_class: Any, on_request: Callable[..., None], pool: list[tuple[SimpleNamespace, Pending, int]],
             rows: int, directory: Path) -> tuple[float, float]:
    """(loop ns per row, writer ns per row) for one log of ``rows`` request rows."""
    log = log_class(directory, "gw", batch_seconds=3600, idle_seconds=3600, roll_seconds=3600, roll_rows=rows,
                    max_queued_rows=rows)
    log.wait_ready()
    holder = SimpleNamespace(_event_log=log)
    calls = [pool[i % len(pool)] for i in range(rows)]
    now_ms = 1_700_000_000_000
    start = time.thread_time_ns()
    for i, (conn, pending, response_bytes) in enumerate(calls):
        on_request(holder, conn, pending, response_bytes, now_ms + i)
    loop_ns = time.thread_time_ns() - start
    writer = log._thread
    before = thread_cpu_ns(writer)
    log.flush()
    writer_ns = thread_cpu_ns(writer) - before
    log.close()
    return loop_ns / rows, writer_ns / rows


def paced_writer_ns(log_class: Any, on_request: Callable[..., None],
                    pool: list[tuple[SimpleNamespace, Pending, int]], rate: int, seconds: float,
                    directory: Path) -> float:
    """Writer ns CPU per row with rows arriving at ``rate`` a second for ``seconds`` (appended every 10 ms), the log
    as the gateway opens it (files rolled every 5 s, the writer's adaptive turns), up to a flush of the last rows."""
    log = log_class(directory, "gw")
    log.wait_ready()
    holder = SimpleNamespace(_event_log=log)
    writer = log._thread
    total = int(rate * seconds)
    before = thread_cpu_ns(writer)
    start, n = time.monotonic(), 0
    while n < total:
        due = min(total, int((time.monotonic() - start) * rate))
        while n < due:
            conn, pending, response_bytes = pool[n % len(pool)]
            on_request(holder, conn, pending, response_bytes, 1_700_000_000_000 + n)
            n += 1
        time.sleep(0.01)
    log.flush()
    writer_ns = thread_cpu_ns(writer) - before
    log.close()
    return writer_ns / total


def empty_loop_ns(pool: list[tuple[SimpleNamespace, Pending, int]], rows: int) -> float:
    def nothing(holder: Any, conn: Any, pending: Any, response_bytes: int, now_ms: int) -> None:
        pass

    calls = [pool[i % len(pool)] for i in range(rows)]
    start = time.thread_time_ns()
    for i, (conn, pending, response_bytes) in enumerate(calls):
        nothing(None, conn, pending, response_bytes, i)
    return (time.thread_time_ns() - start) / rows


def conversions(old: ModuleType, dict_rows: list[dict[str, Any]], tuple_rows: list[tuple[Any, ...]],
                reps: int) -> dict[str, float]:
    """ns per row of each way to convert the same rows, batches of BATCH_ROWS, in this thread."""
    schema = eventlog.REQUEST_LOG_SCHEMA
    types = [f.type for f in schema]
    kind_old = old._Kind(REQUESTS_DIR, old.REQUEST_LOG_SCHEMA, 1)
    kind_new = eventlog._Kind(REQUESTS_DIR, schema, 1, itertools.count().__next__, tuples=True)
    n = eventlog.BATCH_ROWS

    def by_columns(rows: list[tuple[Any, ...]]) -> pa.RecordBatch:
        columns = zip(*rows, strict=True)
        return pa.RecordBatch.from_arrays([pa.array(c, type=t) for c, t in zip(columns, types, strict=True)],
                                          schema=schema)

    ways: dict[str, Callable[[int], pa.RecordBatch]] = {
        "dicts, from_pylist (before)": lambda s: old.EventLog._convert(kind_old, dict_rows[s:s + n]),
        "tuples, struct array (after)": lambda s: eventlog.EventLog._convert(kind_new, tuple_rows[s:s + n]),
        "tuples, zip + pa.array per column": lambda s: by_columns(tuple_rows[s:s + n]),
    }
    out = dict.fromkeys(ways, float("inf"))
    for _ in range(reps):  # interleaved, the best of each: the machine is shared
        for name, convert in ways.items():
            start = time.thread_time_ns()
            for s in range(0, len(tuple_rows), n):
                convert(s)
            out[name] = min(out[name], (time.thread_time_ns() - start) / len(tuple_rows))
    return out


def read_back(directory: Path) -> tuple[pa.Table, list[int], list[bytes]]:
    files = dataset_files(directory / REQUESTS_DIR)
    tables = [pq.read_table(f) for f in files]
    return pa.concat_tables(tables), [t.num_rows for t in tables], [f.name.encode() + f.read_bytes() for f in files]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=50_000, help="request rows per log (one Parquet file)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--paced-rate", type=int, default=700, help="rows a second for the paced writer figure")
    ap.add_argument("--paced-seconds", type=float, default=10.0, help="seconds per paced log (0: skip)")
    ap.add_argument("--paced-rounds", type=int, default=3)
    ap.add_argument("--before", default=BEFORE, help="git ref of the code with dict rows")
    ap.add_argument("--out", type=Path, default=None, help="write the markdown report here too")
    args = ap.parse_args()
    load_before, started = os.getloadavg(), time.time()
    pool = traffic(60)
    with tempfile.TemporaryDirectory(prefix="quotaflow-evrows-") as tmp:
        work = Path(tmp)
        old = before_eventlog(args.before, work)
        old_on_request = before_on_request(args.before)
        sides: dict[str, tuple[Any, Callable[..., None]]] = {
            "before": (old.EventLog, old_on_request), "after": (eventlog.EventLog, after_on_request)}
        loop: dict[str, list[float]] = {"before": [], "after": []}
        writer: dict[str, list[float]] = {"before": [], "after": []}
        empty: list[float] = []
        for name, (log_class, on_request) in sides.items():  # warm-up: the heap grows to hold the queued rows
            run_side(log_class, on_request, pool, args.rows, work / f"{name}-warm-up")
        for r in range(args.rounds):
            order = ["before", "after"] if r % 2 == 0 else ["after", "before"]
            for name in order:
                log_class, on_request = sides[name]
                directory = work / f"{name}-{r}"
                loop_ns, writer_ns = run_side(log_class, on_request, pool, args.rows, directory)
                loop[name].append(loop_ns)
                writer[name].append(writer_ns)
            empty.append(empty_loop_ns(pool, args.rows))
            print(f"round {r + 1}: loop {loop['before'][-1]:.0f} / {loop['after'][-1]:.0f} ns, writer "
                  f"{writer['before'][-1]:.0f} / {writer['after'][-1]:.0f} ns a row (before / after)", flush=True)
            if r == 0:  # the same rows, written both ways: identical files or the run fails
                got_before, sizes_before, bytes_before = read_back(work / "before-0")
                got_after, sizes_after, bytes_after = read_back(work / "after-0")
                assert got_after.schema.remove_metadata().equals(eventlog.REQUEST_LOG_SCHEMA)
                assert got_before.schema.equals(got_after.schema), (got_before.schema, got_after.schema)
                assert got_before.to_pylist() == got_after.to_pylist(), "the two logs hold different rows"
                assert sizes_before == sizes_after and sum(sizes_after) == args.rows, (sizes_before, sizes_after)
                same_bytes = bytes_before == bytes_after

        paced: dict[str, list[float]] = {"before": [], "after": []}
        for r in range(args.paced_rounds if args.paced_seconds > 0 else 0):
            for name in (["before", "after"] if r % 2 == 0 else ["after", "before"]):
                log_class, on_request = sides[name]
                paced[name].append(paced_writer_ns(log_class, on_request, pool, args.paced_rate, args.paced_seconds,
                                                   work / f"{name}-paced-{r}"))
            print(f"paced round {r + 1}: writer {paced['before'][-1]:.0f} / {paced['after'][-1]:.0f} ns a row "
                  f"(before / after)", flush=True)

        # the rows of round 1, rebuilt as each side's caller builds them, for the conversion and size figures
        holder_rows: dict[str, list[Any]] = {}
        for name, (_cls, on_request) in sides.items():
            rows: list[Any] = []
            seq = iter(range(1 << 62)).__next__
            capture = SimpleNamespace(request=rows.append, next_seq=seq,
                                      request_rows=SimpleNamespace(append=rows.append, next_seq=seq))
            for i in range(min(args.rows, 20 * eventlog.BATCH_ROWS)):
                conn, pending, response_bytes = pool[i % len(pool)]
                on_request(SimpleNamespace(_event_log=capture), conn, pending, response_bytes, 1_700_000_000_000 + i)
            holder_rows[name] = rows
        for i, row in enumerate(holder_rows["before"]):  # what before's EventLog._put adds
            row.setdefault("broker", "gw")
            row["seq"] = i
        converted = conversions(old, holder_rows["before"], holder_rows["after"], reps=7)
        size_before = statistics.mean(sys.getsizeof(r) for r in holder_rows["before"])
        size_after = statistics.mean(sys.getsizeof(r) for r in holder_rows["after"])

    med = {k: {n: statistics.median(v) for n, v in d.items()} for k, d in (("loop", loop), ("writer", writer))}
    empty_ns = statistics.median(empty)
    load_after = os.getloadavg()
    lines = [
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs shared with other jobs; load average (1 min) "
        f"{load_before[0]:.1f} before, {load_after[0]:.1f} after; {time.time() - started:.0f} s. Python "
        f"{platform.python_version()}, pyarrow {pa.__version__}. before = `{args.before[:12]}`, after = this tree. "
        f"{args.rows:,} request rows per log (one Parquet file), medians over {args.rounds} round(s).",
        "",
        "| per request row | before (dict) | after (tuple) | after / before |",
        "|---|---:|---:|---:|",
        f"| loop thread: `on_request` (row built + appended), ns CPU | {med['loop']['before']:.0f} | "
        f"{med['loop']['after']:.0f} | **{med['loop']['after'] / med['loop']['before']:.2f}x** |",
        f"| loop thread, less the empty call loop ({empty_ns:.0f} ns) | {med['loop']['before'] - empty_ns:.0f} | "
        f"{med['loop']['after'] - empty_ns:.0f} | "
        f"**{(med['loop']['after'] - empty_ns) / (med['loop']['before'] - empty_ns):.2f}x** |",
        f"| writer thread: take + convert + Parquet + fsync, ns CPU | {med['writer']['before']:.0f} | "
        f"{med['writer']['after']:.0f} | **{med['writer']['after'] / med['writer']['before']:.2f}x** |",
        *([f"| writer thread at {args.paced_rate} rows/s for {args.paced_seconds:g} s (the gateway's log settings: "
           f"5 s files, adaptive turns), ns CPU | {statistics.median(paced['before']):.0f} | "
           f"{statistics.median(paced['after']):.0f} | "
           f"**{statistics.median(paced['after']) / statistics.median(paced['before']):.2f}x** |"]
          if paced["after"] else []),
        f"| conversion alone (batches of {eventlog.BATCH_ROWS:,}), ns CPU | "
        f"{converted['dicts, from_pylist (before)']:.0f} | {converted['tuples, struct array (after)']:.0f} | "
        f"**{converted['tuples, struct array (after)'] / converted['dicts, from_pylist (before)']:.2f}x** |",
        f"| conversion by `zip(*rows)` + `pa.array` per column (not taken), ns CPU | | "
        f"{converted['tuples, zip + pa.array per column']:.0f} | "
        f"{converted['tuples, zip + pa.array per column'] / converted['dicts, from_pylist (before)']:.2f}x |",
        f"| queued row's container, bytes | {size_before:.0f} | {size_after:.0f} | {size_after / size_before:.2f}x |",
        f"| loop + writer, ns CPU | {med['loop']['before'] + med['writer']['before']:.0f} | "
        f"{med['loop']['after'] + med['writer']['after']:.0f} | "
        f"**{(med['loop']['after'] + med['writer']['after']) / (med['loop']['before'] + med['writer']['before']):.2f}x"
        f"** |",
        "",
        f"Output: the same {args.rows:,} rows written both ways read back identical (schema, values, `seq`, rows per "
        f"file); the Parquet files, names and bytes: {'the same' if same_bytes else 'NOT the same'}.",
        "",
        "Rounds (loop / writer ns a row, before → after): " + "; ".join(
            f"{lb:.0f}/{wb:.0f} → {la:.0f}/{wa:.0f}"
            for lb, wb, la, wa in zip(loop["before"], writer["before"], loop["after"], writer["after"], strict=True))
        + ("; paced writer ns a row: " + ", ".join(f"{b:.0f} → {a:.0f}" for b, a in zip(paced["before"], paced["after"],
                                                                                      strict=True))
           if paced["after"] else ""),
    ]
    report = "\n".join(lines)
    print()
    print(report)
    if args.out is not None:
        args.out.write_text(report + "\n")


if __name__ == "__main__":
    main()
