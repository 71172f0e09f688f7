"""Authorizer decision cost: 100 vs 10,000 ACLs, against a full scan of Kafka's rule, in one process run.

    PYTHONPATH=src .venv/bin/python bench/authorizer.py [--decisions 200000] [--out bench/results/authorizer.md]

The ACL sets look like a multi-tenant cluster's: per tenant, a PREFIXED topic pattern (WRITE, READ), a literal
group (READ), a DENY on one host; plus ``User:*`` DESCRIBE on a wildcard topic and a few cluster ACLs. Decisions are
the gateway's mix (a tenant's own topic and group, someone else's topic), by the same 20 tenants in both sets, so
the only difference is the number of ACLs (a second row per set spreads the requests over every tenant, which also
grows the working set the CPU caches see). Reported: CPU ns per ``authorize`` call of
:class:`~quotaflow.core.authorizer.StandardAuthorizer` at 100 and 10,000 ACLs (the ratio is the index's promise:
flat), the same decisions by a scan of every ACL (the baseline an index replaces), and the index build time (what the
gateway spends, off the event loop, when the store's ACLs change). Every decision of the index is checked against the
scan.
"""

from __future__ import annotations

import argparse
import platform
import random
import time
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
from quotaflow.core.authorizer import AclIndex, StandardAuthorizer, operation_matches

Request = tuple[str, str, AclOperation, ResourceType, str]
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY


def acls_for(tenants: int) -> list[AclBinding]:
    """About 5 ACLs per tenant, plus shared ones."""
    out = [AclBinding(ResourcePattern(ResourceType.TOPIC, "*", PatternType.LITERAL),
                      AccessControlEntry("User:*", "*", AclOperation.DESCRIBE, ALLOW)),
           AclBinding(ResourcePattern(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL),
                      AccessControlEntry("User:*", "*", AclOperation.IDEMPOTENT_WRITE, ALLOW))]
    for t in range(tenants):
        user = f"User:tenant-{t}"
        topic = ResourcePattern(ResourceType.TOPIC, f"tenant-{t}.", PatternType.PREFIXED)
        out += [AclBinding(topic, AccessControlEntry(user, "*", AclOperation.WRITE, ALLOW)),
                AclBinding(topic, AccessControlEntry(user, "*", AclOperation.READ, ALLOW)),
                AclBinding(ResourcePattern(ResourceType.GROUP, f"tenant-{t}-app", PatternType.LITERAL),
                           AccessControlEntry(user, "*", AclOperation.READ, ALLOW)),
                AclBinding(topic, AccessControlEntry(user, f"10.66.{t >> 8 & 255}.{t & 255}", AclOperation.ALL,
                                                     DENY)),
                AclBinding(ResourcePattern(ResourceType.TOPIC, f"tenant-{t}.audit", PatternType.LITERAL),
                           AccessControlEntry(user, "*", AclOperation.WRITE, DENY))]
    return out


def requests_for(tenants: int, n: int, seed: int = 7) -> list[Request]:
    """``n`` requests by tenants 0 .. tenants-1."""
    rng = random.Random(seed)
    out: list[Request] = []
    for i in range(n):
        t = rng.randrange(tenants)
        user, host = f"User:tenant-{t}", f"10.1.{i & 255}.{t & 255}"
        kind = i % 5
        if kind == 0:
            out.append((user, host, AclOperation.WRITE, ResourceType.TOPIC, f"tenant-{t}.orders"))
        elif kind == 1:
            out.append((user, host, AclOperation.READ, ResourceType.TOPIC, f"tenant-{t}.orders"))
        elif kind == 2:
            out.append((user, host, AclOperation.READ, ResourceType.GROUP, f"tenant-{t}-app"))
        elif kind == 3:
            out.append((user, host, AclOperation.READ, ResourceType.TOPIC, f"tenant-{rng.randrange(tenants)}.x"))
        else:
            out.append((user, host, AclOperation.DESCRIBE, ResourceType.TOPIC, f"tenant-{t}.orders"))
    return out


def scan(acls: list[AclBinding], principal: str, host: str, op: AclOperation, rt: ResourceType, name: str) -> bool:
    """Kafka's rule by scanning every ACL (no index): the baseline."""
    applicable = False
    allowed = False
    for b in acls:
        p = b.pattern
        if p.resource_type != rt:
            continue
        if p.pattern_type == PatternType.LITERAL:
            if p.name != name and p.name != "*":
                continue
        elif not name.startswith(p.name):
            continue
        applicable = True
        e = b.entry
        if e.principal not in (principal, "User:*") or e.host not in ("*", host) or not operation_matches(op, e):
            continue
        if e.permission_type == DENY:
            return False
        allowed = True
    return allowed if applicable else False


def cpu_ns_per_call(fn: object, requests: list[Request]) -> float:
    call = fn  # a bound method or function taking the request's fields
    start = time.process_time_ns()
    for r in requests:
        call(*r)  # type: ignore[operator]
    return (time.process_time_ns() - start) / len(requests)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--decisions", type=int, default=200_000)
    parser.add_argument("--out", type=Path, default=Path("bench/results/authorizer.md"))
    args = parser.parse_args()
    rows: list[str] = []
    results: dict[int, float] = {}
    for tenants in (20, 2_000):
        acls = acls_for(tenants)
        start = time.process_time_ns()
        index = AclIndex(acls)
        build_ms = (time.process_time_ns() - start) / 1e6
        authorizer = StandardAuthorizer((), False, ())
        authorizer.load(index)
        for who, requests in (("same 20 tenants", requests_for(20, args.decisions)),
                              (f"all {tenants} tenants", requests_for(tenants, args.decisions))):
            if who.startswith("all 20 "):
                continue
            sample = requests[:2_000]
            for r in sample:
                assert authorizer.authorize(*r) == scan(acls, *r), r
            per_call = min(cpu_ns_per_call(authorizer.authorize, requests) for _ in range(3))
            scan_call = cpu_ns_per_call(lambda *r, acls=acls: scan(acls, *r), sample)
            if who.startswith("same"):
                results[len(acls)] = per_call
            allowed = sum(authorizer.authorize(*r) for r in requests) / len(requests)
            rows.append(f"| {len(acls):,} | {who} | {per_call:,.0f} | {scan_call:,.0f} | "
                        f"{scan_call / per_call:,.1f}× | {build_ms:,.1f} | {allowed:.0%} |")
    small, large = sorted(results)
    ratio = results[large] / results[small]
    text = "\n".join([
        "## Authorizer decision: 100 vs 10,000 ACLs (bench/authorizer.py)",
        "",
        f"Command: `PYTHONPATH=src .venv/bin/python bench/authorizer.py --decisions {args.decisions}`",
        "",
        f"Machine: {platform.machine()}, Python {platform.python_version()}, {platform.system()} "
        "(CPU time of this process; the 2 cores are shared, so compare within this run)",
        "",
        "| ACLs | requests by | index: CPU ns / decision | full scan (baseline): ns / decision | scan / index |"
        " index build ms | allowed |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"**{large:,} vs {small:,} ACLs, same requests: {ratio:.2f}× the CPU per decision** (the target: about the "
        "same).",
        "",
    ])
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)


if __name__ == "__main__":
    main()
