"""Kafka's ACL vocabulary, with Kafka's wire codes, and the one question the gateway asks of an authorizer.

The codes are the ones CreateAcls / DescribeAcls / DeleteAcls carry (``org.apache.kafka.common.resource`` and
``org.apache.kafka.common.acl``), so a decoded request maps onto these enums without a table. The decision itself
(super users, deny before allow, prefixed and wildcard patterns, implied operations) lives in the authorizer that
implements :class:`Authorizer`; the gateway's per-API checks depend only on this protocol.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Final, Protocol, TypeVar

CLUSTER_NAME: Final = "kafka-cluster"  # the one CLUSTER resource's name
WILDCARD: Final = "*"  # a LITERAL resource name, principal ``User:*`` or host that matches everything


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


def kafka_principal(user: str) -> str:
    """The gateway's session user (``alice``) as Kafka's principal string (``User:alice``); already-typed
    principals are kept."""
    return user if ":" in user and user.split(":", 1)[0] in ("User", "Group") else f"User:{user}"


def principal_allowed(admins: frozenset[str] | None, name: str) -> bool:
    """The admin list's rule (``--admin-principal``: the gateway's and the console's super users when no
    authorizer decides): ``admins`` None, every authenticated principal may; else ``name`` is listed as it is
    (``alice``) or as Kafka's principal (``User:alice``)."""
    return admins is None or name in admins or kafka_principal(name) in admins


@functools.lru_cache(maxsize=4096)
def _java_ipv6(host: str) -> str:
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)  # Java hands an IPv4-mapped address over as an Inet4Address
    scope = host[host.index("%"):] if "%" in host else ""
    return ":".join(f"{int(group, 16):x}" for group in address.exploded.split(":")) + scope


def java_host_address(host: str) -> str:
    """A client address as Kafka's authorizer sees it (``InetAddress.getHostAddress``), the form ACL hosts are
    compared with: IPv4 as it is; IPv6 in full, without zero compression or leading zeros (``::1`` ->
    ``0:0:0:0:0:0:0:1``); an IPv4-mapped IPv6 address as its IPv4 address."""
    return host if ":" not in host else _java_ipv6(host)


class Authorizer(Protocol):
    """What the gateway's per-API checks ask. ``principal`` is Kafka's form (``User:alice``), ``host`` the client's
    IP address string. Implementations answer from memory (no I/O on the request path).

    ``generation`` is the contract that lets a caller cache decisions: it changes (to a value never used before by
    this object) every time any decision may change, after the new ACLs are in place, so a decision computed
    while it held one value is valid for as long as it holds that value. None: decisions may change at any time
    (nothing may be cached)."""

    @property
    def generation(self) -> int | None: ...

    def authorize(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
                  name: str) -> bool:
        """Whether ``principal`` from ``host`` may do ``operation`` on the literal resource ``(resource_type, name)``
        (StandardAuthorizer's decision)."""
        ...

    def authorize_by_resource_type(self, principal: str, host: str, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        """Whether some resource of ``resource_type`` could allow ``operation`` (Kafka's
        ``authorizeByResourceType``: InitProducerId's IDEMPOTENT_WRITE fallback to WRITE on any topic)."""
        ...


_E = TypeVar("_E", bound=IntEnum)


# -- names (Kafka's SecurityUtils: PascalCase, or its upper-case form) ----------------------------------------------

def pascal_name(member: IntEnum) -> str:
    """Kafka's display name of an enum member: ``IDEMPOTENT_WRITE`` -> ``IdempotentWrite``."""
    return "".join(part.capitalize() for part in member.name.split("_"))


def _from_name(enum: type[_E], name: str, unknown: _E) -> _E:
    """Kafka's lookup: the PascalCase name, or its upper-case form (``Read``, ``READ``, ``IdempotentWrite``,
    ``IDEMPOTENTWRITE``); the enum's own name (``IDEMPOTENT_WRITE``) is accepted too. UNKNOWN otherwise."""
    key = name.strip()
    for member in enum:
        pascal = pascal_name(member)
        if key in (pascal, pascal.upper(), member.name):
            return member
    return unknown


def operation_from_name(name: str) -> AclOperation:
    return _from_name(AclOperation, name, AclOperation.UNKNOWN)


def permission_from_name(name: str) -> AclPermissionType:
    return _from_name(AclPermissionType, name, AclPermissionType.UNKNOWN)


def resource_type_from_name(name: str) -> ResourceType:
    return _from_name(ResourceType, name, ResourceType.UNKNOWN)


def pattern_type_from_name(name: str) -> PatternType:
    """PatternType by name, case-insensitive (Kafka's ``PatternType.fromString``)."""
    try:
        return PatternType[name.strip().upper()]
    except KeyError:
        return PatternType.UNKNOWN


# Operations each resource type supports (Kafka's ``AclEntry.supportedOperations``); ALL is valid on every type.
SUPPORTED_OPERATIONS: Final[Mapping[ResourceType, frozenset[AclOperation]]] = {
    ResourceType.TOPIC: frozenset({AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
                                   AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
                                   AclOperation.ALTER_CONFIGS}),
    ResourceType.GROUP: frozenset({AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE,
                                   AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}),
    ResourceType.CLUSTER: frozenset({AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
                                     AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                                     AclOperation.DESCRIBE}),
    ResourceType.TRANSACTIONAL_ID: frozenset({AclOperation.DESCRIBE, AclOperation.WRITE}),
    ResourceType.DELEGATION_TOKEN: frozenset({AclOperation.DESCRIBE}),
    ResourceType.USER: frozenset({AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS}),
}


def parse_principal(text: str) -> tuple[str, str]:
    """``Type:name`` split at the first colon (Kafka's ``SecurityUtils.parseKafkaPrincipal``); ValueError with
    Kafka's message otherwise."""
    kind, sep, name = text.partition(":")
    if not text or not sep:
        raise ValueError(f"expected a string in format principalType:principalName but got {text}")
    return kind, name


# -- bindings and filters (org.apache.kafka.common.acl / .resource) ---------------------------------------------


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    """A resource pattern an ACL is attached to: LITERAL (``*`` = every name) or PREFIXED."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType

    def __str__(self) -> str:
        return (f"ResourcePattern(resourceType={self.resource_type.name}, name={self.name}, "
                f"patternType={self.pattern_type.name})")


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    """Who (principal, host), what (operation), and whether it is allowed or denied."""

    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    def __str__(self) -> str:
        return (f"(principal={self.principal}, host={self.host}, operation={self.operation.name}, "
                f"permissionType={self.permission_type.name})")


@dataclass(frozen=True, slots=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry

    def __str__(self) -> str:
        return f"(pattern={self.pattern}, entry={self.entry})"

    def sort_key(self) -> tuple[int, str, int, str, str, int, int]:
        p, e = self.pattern, self.entry
        return (p.resource_type, p.name, p.pattern_type, e.principal, e.host, e.operation, e.permission_type)


@dataclass(frozen=True, slots=True)
class ResourcePatternFilter:
    """Kafka's ``ResourcePatternFilter``: ANY resource type, a null name (any), and pattern types ANY (exact name, any
    pattern type) and MATCH (every pattern that applies to the name: equal literal, literal ``*``, prefixes)."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY

    @property
    def is_unknown(self) -> bool:
        return self.resource_type == ResourceType.UNKNOWN or self.pattern_type == PatternType.UNKNOWN

    def matches(self, pattern: ResourcePattern) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != pattern.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type != pattern.pattern_type:
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, pattern.pattern_type):
            return self.name == pattern.name
        if pattern.pattern_type == PatternType.LITERAL:
            return self.name == pattern.name or pattern.name == WILDCARD
        if pattern.pattern_type == PatternType.PREFIXED:
            return self.name.startswith(pattern.name)
        raise ValueError(f"Unsupported PatternType: {pattern.pattern_type.name}")

    def __str__(self) -> str:
        name = "<any>" if self.name is None else self.name
        return (f"ResourcePattern(resourceType={self.resource_type.name}, name={name}, "
                f"patternType={self.pattern_type.name})")


@dataclass(frozen=True, slots=True)
class AccessControlEntryFilter:
    """Kafka's ``AccessControlEntryFilter``: None principal / host match any; operation / permission ANY match any."""

    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    @property
    def is_unknown(self) -> bool:
        return self.operation == AclOperation.UNKNOWN or self.permission_type == AclPermissionType.UNKNOWN

    def matches(self, entry: AccessControlEntry) -> bool:
        return ((self.principal is None or self.principal == entry.principal)
                and (self.host is None or self.host == entry.host)
                and (self.operation == AclOperation.ANY or self.operation == entry.operation)
                and (self.permission_type == AclPermissionType.ANY or self.permission_type == entry.permission_type))

    def __str__(self) -> str:
        return (f"(principal={'<any>' if self.principal is None else self.principal}, "
                f"host={'<any>' if self.host is None else self.host}, operation={self.operation.name}, "
                f"permissionType={self.permission_type.name})")


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    pattern_filter: ResourcePatternFilter = ResourcePatternFilter()
    entry_filter: AccessControlEntryFilter = AccessControlEntryFilter()

    def matches(self, binding: AclBinding) -> bool:
        return self.pattern_filter.matches(binding.pattern) and self.entry_filter.matches(binding.entry)

    def __str__(self) -> str:
        return f"(patternFilter={self.pattern_filter}, entryFilter={self.entry_filter})"


ANY_FILTER: Final = AclBindingFilter()


def binding_filter(binding: AclBinding) -> AclBindingFilter:
    """The filter that matches exactly ``binding`` (Kafka's ``AclBinding.toFilter``)."""
    p, e = binding.pattern, binding.entry
    return AclBindingFilter(ResourcePatternFilter(p.resource_type, p.name, p.pattern_type),
                            AccessControlEntryFilter(e.principal, e.host, e.operation, e.permission_type))


def from_code(enum: type[_E], code: int, unknown: _E) -> _E:
    """A wire code as its enum member; a code Kafka does not define is UNKNOWN (Kafka's ``fromCode``)."""
    try:
        return enum(code)
    except ValueError:
        return unknown


def binding_problem(binding: AclBinding) -> str | None:
    """Why a binding cannot be stored, in a broker's words and order; None when it can.

    A broker's ``AclApis.handleCreateAcls`` checks the CLUSTER resource's name, then an empty name ("Invalid empty
    resource name"), before the controller's ``AclControlManager.validateNewAcl`` sees the binding (types, then its
    own "Resource name should not be empty", never reached through a broker). A principal must be ``Type:name``
    (Kafka stores one without a colon and then fails every decision on that resource; refusing it up front keeps the
    set usable)."""
    p, e = binding.pattern, binding.entry
    if p.resource_type == ResourceType.CLUSTER and p.name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if not p.name:
        return "Invalid empty resource name"
    if p.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return f"Invalid resourceType {p.resource_type.name}"
    if p.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid patternType {p.pattern_type.name}"
    if e.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        return f"Invalid operation {e.operation.name}"
    if e.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        return f"Invalid permissionType {e.permission_type.name}"
    if ":" not in e.principal:
        return (f"Could not parse principal from `{e.principal}` (no colon is present separating the principal type "
                f"from the principal name)")
    return None
