"""Every field of a request that names a resource, found in Kafka's own message definitions, version by version.

kafka-python 3.0.12 ships Kafka's JSON request definitions (``kafka/protocol/schemas/resources/*.json``; each
generated message class keeps its definition as ``_json``) with Kafka's ``entityType`` marks on the fields that
name a topic, group, transactional id, broker or producer id, and each field's ``versions``. This module walks a
request's definition and lists every resource-bearing field with its path and the versions it exists in:

* a field marked with an ``entityType`` (topicName, groupId, transactionalId, brokerId, producerId);
* a ``uuid`` field naming a topic by id (``TopicId``, KIP-516);
* the unmarked fields that name resources all the same (:data:`UNMARKED`): config and ACL resources
  (``ResourceName``), SCRAM users, FindCoordinator's key (a group or a transactional id, by ``KeyType``).

What it finds is checked against the rule table (:mod:`quotaflow.gateway.auth.rules`): a version carrying a field no
rule covers is neither offered nor accepted, so a new version or API cannot slip past the gateway's authorization.
Pure: nothing here depends on the gateway.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from kafka.protocol.api_message import ApiMessage

TOPIC_ID: Final = "topicId"
CONFIG_RESOURCE: Final = "configResource"
ACL_RESOURCE: Final = "aclResource"
USER: Final = "user"
COORDINATOR_KEY: Final = "coordinatorKey"

UNMARKED: Final[Mapping[str, Mapping[str, str]]] = {
    "FindCoordinatorRequest": {"Key": COORDINATOR_KEY, "CoordinatorKeys": COORDINATOR_KEY},
    "DescribeConfigsRequest": {"Resources.ResourceName": CONFIG_RESOURCE},
    "AlterConfigsRequest": {"Resources.ResourceName": CONFIG_RESOURCE},
    "IncrementalAlterConfigsRequest": {"Resources.ResourceName": CONFIG_RESOURCE},
    "DescribeAclsRequest": {"ResourceNameFilter": ACL_RESOURCE},
    "CreateAclsRequest": {"Creations.ResourceName": ACL_RESOURCE},
    "DeleteAclsRequest": {"Filters.ResourceNameFilter": ACL_RESOURCE},
    "DescribeUserScramCredentialsRequest": {"Users.Name": USER},
    "AlterUserScramCredentialsRequest": {"Deletions.Name": USER, "Upsertions.Name": USER},
    "DescribeClientQuotasRequest": {"Components.Match": USER},
    "AlterClientQuotasRequest": {"Entries.Entity.EntityName": USER},
}
"""Fields Kafka's definitions leave without an ``entityType`` that name a resource all the same, by request and
path (a client id or user in the quota APIs is counted as a user)."""


@dataclass(frozen=True, slots=True)
class ResourceField:
    """One resource-bearing field: its path (the definition's field names joined by "."), what it names (an
    ``entityType`` or one of this module's kinds) and the versions it exists in."""

    path: str
    kind: str
    first: int
    last: int

    def at(self, version: int) -> bool:
        return self.first <= version <= self.last


def _versions(spec: str | None, within: tuple[int, int]) -> tuple[int, int]:
    lo, hi = within
    if spec is None or spec == "none":
        return 1, 0
    if spec.endswith("+"):
        first, last = int(spec[:-1]), hi
    elif "-" in spec:
        a, b = spec.split("-")
        first, last = int(a), int(b)
    else:
        first = last = int(spec)
    return max(first, lo), min(last, hi)


def _walk(fields: Sequence[Mapping[str, Any]], structs: Mapping[str, Sequence[Mapping[str, Any]]],
          unmarked: Mapping[str, str], prefix: str, within: tuple[int, int]) -> Iterator[ResourceField]:
    for spec in fields:
        first, last = _versions(spec.get("versions"), within)
        if first > last:
            continue
        path = f"{prefix}{spec['name']}"
        kind = spec.get("entityType") or unmarked.get(path)
        ftype = str(spec["type"])
        if kind is None and ftype == "uuid" and spec["name"].endswith("TopicId"):
            kind = TOPIC_ID
        if kind is not None:
            yield ResourceField(path, str(kind), first, last)
        children = spec.get("fields")
        if children is None:
            children = structs.get(ftype[2:] if ftype.startswith("[]") else ftype)
        if children:
            yield from _walk(children, structs, unmarked, f"{path}.", (first, last))


def definition(cls: type[ApiMessage] | None) -> Mapping[str, Any] | None:
    """A request class's JSON definition (None: kafka-python has none for it)."""
    found = getattr(cls, "_json", None) if cls is not None else None
    return found if isinstance(found, Mapping) else None


def valid_versions(cls: type[ApiMessage] | None) -> tuple[int, int] | None:
    """The versions Kafka's definition of this request describes (``validVersions``)."""
    spec = definition(cls)
    if spec is None:
        return None
    first, last = _versions(str(spec["validVersions"]), (0, 1 << 15))
    return (first, last) if first <= last else None


_FOUND: dict[type[ApiMessage], tuple[ResourceField, ...]] = {}


def resource_fields(cls: type[ApiMessage]) -> tuple[ResourceField, ...]:
    """Every resource-bearing field of this request, over all its valid versions (walked once per class)."""
    found = _FOUND.get(cls)
    if found is None:
        spec, versions = definition(cls), valid_versions(cls)
        found = ()
        if spec is not None and versions is not None:
            structs = {s["name"]: s["fields"] for s in spec.get("commonStructs", [])}
            found = tuple(_walk(spec["fields"], structs, UNMARKED.get(str(spec["name"]), {}), "", versions))
        _FOUND[cls] = found
    return found


def fields_at(cls: type[ApiMessage], version: int) -> tuple[ResourceField, ...]:
    """The resource-bearing fields of this request at ``version``."""
    return tuple(f for f in resource_fields(cls) if f.at(version))
