"""A CLI ``--describe`` on a ``kafka://`` store holding many ACLs (issue 37.3): reading the whole topic from offset 0
(what every command did before: "before") against starting from the newest checkpoint (what commands do now:
"after"), side by side in one run, on a real tansu broker on loopback.

    .venv/bin/python bench/store_scale.py [--sizes 10000,100000] [--rounds 3] [--signed] [--out FILE]

For each size, one topic is filled with that many ACL bindings (one record each, written in batches of 10,000
through ``KafkaStore.add_acls``, which adds checkpoints as it goes); then, interleaved per round, a reader opens the
store both ways and describes one resource's ACLs (what ``quotaflow acls --list --topic T`` does). Reported: the
median wall time of open + describe and the records each reader read from the topic. Wall clock on a shared
machine; the record counts are exact.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
import uuid
import warnings
from pathlib import Path

from quotaflow.core.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from quotaflow.store.kafka import KafkaStore

BATCH = 10_000


def _acl(i: int) -> AclBinding:
    return AclBinding(ResourcePattern(ResourceType.TOPIC, f"topic-{i % 5000}", PatternType.LITERAL),
                      AccessControlEntry(f"User:tenant-{i}", "*", AclOperation.READ, AclPermissionType.ALLOW))


def _describe(url: str, from_checkpoint: bool) -> tuple[float, int, int]:
    """Open the store one way and describe topic-7's ACLs: (seconds, records read, bindings found)."""
    start = time.perf_counter()
    with KafkaStore(url, from_checkpoint=from_checkpoint) as store:
        found = [b for b in store.acls().bindings if b.pattern.name == "topic-7"]
        return time.perf_counter() - start, store.records_read, len(found)


def measure(bootstrap: str, size: int, rounds: int, key_file: str | None) -> dict[str, float]:
    url = f"kafka://{bootstrap}/bench-acls-{uuid.uuid4().hex[:8]}?request.timeout.ms=120000"
    if key_file:
        url += f"&quotaflow.store.signing.key.file={key_file}"
    start = time.perf_counter()
    with KafkaStore(url) as writer:
        for lo in range(0, size, BATCH):
            writer.add_acls([_acl(i) for i in range(lo, min(size, lo + BATCH))])
        total = writer.last_seq()
    fill_s = time.perf_counter() - start
    before: list[float] = []
    after: list[float] = []
    read_before = read_after = 0
    for _ in range(rounds):
        seconds, read_before, found_before = _describe(url, from_checkpoint=False)
        before.append(seconds)
        seconds, read_after, found_after = _describe(url, from_checkpoint=True)
        after.append(seconds)
        assert found_before == found_after, (found_before, found_after)
    return {"records in the topic": total, "fill (s)": fill_s, "before: open + describe (s)": statistics.median(before),
            "after: open + describe (s)": statistics.median(after), "before: records read": read_before,
            "after: records read": read_after}


def main() -> None:
    warnings.simplefilter("ignore", DeprecationWarning)
    from quotaflow.testing.tansu import Tansu

    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--signed", action="store_true", help="sign the records (quotaflow.store.signing.key.file)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    results = {}
    with tempfile.TemporaryDirectory() as tmp, Tansu() as tansu:
        key_file = None
        if args.signed:
            key_file = str(Path(tmp) / "fleet.key")
            Path(key_file).write_text("bench-fleet-key-0123456789abcdef0123456789\n")
        for size in sizes:
            results[size] = measure(tansu.bootstrap, size, args.rounds, key_file)
    flags = f"--sizes {args.sizes} --rounds {args.rounds}" + (" --signed" if args.signed else "")
    lines = [
        f"Command: `.venv/bin/python bench/store_scale.py {flags}`",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load {os.getloadavg()[0]:.1f} (tansu, memory "
        "storage, loopback)",
        "",
        "| ACLs | records in the topic | before: open + describe | after: open + describe | after / before | "
        "records read before | records read after |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for size, r in results.items():
        lines.append(f"| {size:,} | {r['records in the topic']:,.0f} | {r['before: open + describe (s)']:.2f} s | "
                     f"{r['after: open + describe (s)']:.2f} s | "
                     f"{r['after: open + describe (s)'] / r['before: open + describe (s)']:.2f}× | "
                     f"{r['before: records read']:,.0f} | {r['after: records read']:,.0f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
