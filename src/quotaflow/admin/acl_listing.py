"""ACLs as ``kafka-acls.sh`` prints them, and back: the lines of ``--add`` / ``--list`` (Kafka's ``AclCommand``), and
the parser that reads a cluster's ``kafka-acls --list`` output so its ACLs can be imported (migration).

Kafka prints a resource's entries as ``Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=t,
patternType=LITERAL)`: `` followed by one tab-indented ``(principal=User:alice, host=*, operation=READ,
permissionType=ALLOW)`` per entry (the ``toString`` of ``ResourcePattern`` and ``AccessControlEntry``). The import
also reads what ``kafka-acls --authorizer-properties zookeeper.connect=...`` printed on ZooKeeper-era clusters:
``Current ACLs for resource `Topic:LITERAL:t`: `` (``Topic:t`` before prefixed ACLs) and ``User:alice has Allow
permission for operations: Read from hosts: *``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from quotaflow.core.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    operation_from_name,
    permission_from_name,
    resource_type_from_name,
)
from quotaflow.core.errors import CommandError

_PATTERN: Final = re.compile(r"ResourcePattern\(resourceType=(\w+), name=(.*), patternType=(\w+)\)`?:?\s*$")
_ENTRY: Final = re.compile(r"^\s*\(principal=(.*), host=(.*), operation=(\w+), permissionType=(\w+)\)\s*$")
_HEADER: Final = re.compile(r"^\s*(?:Current ACLs|Adding ACLs) for resource `")
_OLD_PATTERN: Final = re.compile(r"for resource `([^`]*)`")
_OLD_ENTRY: Final = re.compile(r"^\s*(.*) has (\w+) permission for operations: (.*) from hosts: (.*?)\s*$")


def resource_lines(verb: str, resource: ResourcePattern | ResourcePatternFilter,
                   entries: Iterable[AccessControlEntry]) -> str:
    """``{verb} for resource `...`: `` then the entries, exactly as AclCommand's ``println`` writes them (a space
    after the colon and a space at the end of the block, a blank line after it)."""
    body = "\n".join(f"\t{e}" for e in sort_entries(entries))
    return f"{verb} for resource `{resource}`: \n {body} \n"


def sort_entries(entries: Iterable[AccessControlEntry]) -> list[AccessControlEntry]:
    return sorted(entries, key=lambda e: (e.principal, e.host, int(e.operation), int(e.permission_type)))


def by_resource(bindings: Iterable[AclBinding]) -> dict[ResourcePattern, list[AccessControlEntry]]:
    """Bindings grouped by resource pattern, patterns in a stable order (Kafka's map order is a hash's)."""
    grouped: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for b in bindings:
        grouped.setdefault(b.pattern, []).append(b.entry)
    return {p: grouped[p] for p in sorted(grouped, key=lambda p: (int(p.resource_type), p.name,
                                                                  int(p.pattern_type)))}


def listing(bindings: Iterable[AclBinding]) -> str:
    """``kafka-acls --list`` output for these bindings."""
    return "".join(resource_lines("Current ACLs", p, es) + "\n" for p, es in by_resource(bindings).items())


def _enum(kind: type[ResourceType] | type[PatternType] | type[AclOperation] | type[AclPermissionType],
          name: str, line: int) -> int:
    try:
        return int(kind[name])
    except KeyError:
        raise CommandError(f"line {line}: unknown {kind.__name__} {name!r}") from None


def parse_listing(text: str) -> list[AclBinding]:
    """Every binding in ``kafka-acls --list`` (or ``--add``) output; other lines (``ACLs for principal ...``,
    blank lines, warnings) are skipped. An entry outside a resource block, or a name Kafka does not print, is a
    :class:`CommandError` naming the line."""
    out: list[AclBinding] = []
    pattern: ResourcePattern | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        if _HEADER.match(line):
            found = _PATTERN.search(line)
            pattern = (ResourcePattern(ResourceType(_enum(ResourceType, found[1], number)), found[2],
                                       PatternType(_enum(PatternType, found[3], number))) if found is not None
                       else _old_pattern(line, number))
            continue
        old = _OLD_ENTRY.match(line)
        if old is not None:
            if pattern is None:
                raise CommandError(f"line {number}: an ACL entry outside a resource block: {line.strip()}")
            out += _old_entries(pattern, old.groups(), number)
            continue
        entry = _ENTRY.match(line)
        if entry is None:
            if line.strip() and not line.startswith("ACLs for principal"):
                pattern = None  # a resource block ends at anything else
            continue
        if pattern is None:
            raise CommandError(f"line {number}: an ACL entry outside a resource block: {line.strip()}")
        principal, host, op, perm = entry.groups()
        out.append(AclBinding(pattern, AccessControlEntry(principal, host,
                                                          AclOperation(_enum(AclOperation, op, number)),
                                                          AclPermissionType(_enum(AclPermissionType, perm, number)))))
    return out


def _old_pattern(line: str, number: int) -> ResourcePattern:
    """A ZooKeeper-era ``Resource`` string: ``Topic:LITERAL:name``, or ``Topic:name`` (literal)."""
    found = _OLD_PATTERN.search(line)
    if found is None:
        raise CommandError(f"line {number}: not a resource header: {line.strip()}")
    kind, _, rest = found[1].partition(":")
    rt = resource_type_from_name(kind)
    if rt in (ResourceType.UNKNOWN, ResourceType.ANY) or not rest:
        raise CommandError(f"line {number}: unknown resource {found[1]!r}")
    pt_name, sep, name = rest.partition(":")
    if sep and pt_name in ("LITERAL", "PREFIXED"):
        return ResourcePattern(rt, name, PatternType[pt_name])
    return ResourcePattern(rt, rest, PatternType.LITERAL)


def _old_entries(pattern: ResourcePattern, fields: Sequence[str], number: int) -> list[AclBinding]:
    """``User:alice has Allow permission for operations: Read,Write from hosts: *``: one binding per operation."""
    principal, perm_name, ops, host = fields
    perm = permission_from_name(perm_name)
    if perm not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        raise CommandError(f"line {number}: unknown permission {perm_name!r}")
    out: list[AclBinding] = []
    for op_name in ops.split(","):
        op = operation_from_name(op_name)
        if op in (AclOperation.UNKNOWN, AclOperation.ANY):
            raise CommandError(f"line {number}: unknown operation {op_name.strip()!r}")
        out.append(AclBinding(pattern, AccessControlEntry(principal.strip(), host, op, perm)))
    return out


def grouped_lines(verb: str, groups: Mapping[ResourcePattern, Sequence[AccessControlEntry]]) -> str:
    return "".join(resource_lines(verb, p, es) + "\n" for p, es in groups.items())
