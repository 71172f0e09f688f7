"""A small in-memory :class:`quotaflow.core.acl.Authorizer` for the gateway's authorization tests.

Kafka's decision (StandardAuthorizer) for literal and prefixed patterns, ``*`` names, ``User:*`` principals and ``*``
hosts: super users first, DENY before ALLOW, the implied operations for ALLOW only, the no-ACL default. The real
authorizer with its store is the authz-core lane's; the gateway's checks depend only on the protocol.
"""

from __future__ import annotations

from dataclasses import dataclass

from quotaflow.core.acl import WILDCARD, AclOperation, ResourceType

_DESCRIBE_IMPLIERS = {AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER,
                      AclOperation.DESCRIBE}
_DESCRIBE_CONFIGS_IMPLIERS = {AclOperation.ALTER_CONFIGS, AclOperation.DESCRIBE_CONFIGS}


@dataclass(frozen=True)
class Acl:
    principal: str
    operation: AclOperation
    resource_type: ResourceType
    name: str
    prefixed: bool = False
    allow: bool = True
    host: str = WILDCARD


class MemoryAuthorizer:
    generation: int | None = None  # tests change ``acls`` in place: nothing may be cached

    def __init__(self, acls: list[Acl] | None = None, *, super_users: frozenset[str] = frozenset(),
                 allow_if_no_acl: bool = False) -> None:
        self.acls = list(acls or [])
        self.super_users = super_users
        self.allow_if_no_acl = allow_if_no_acl
        self.calls = 0

    def _matching(self, principal: str, host: str, rtype: ResourceType, name: str) -> list[Acl]:
        return [a for a in self.acls if a.resource_type == rtype and a.principal in (principal, "User:*")
                and a.host in (host, WILDCARD)
                and (name.startswith(a.name) if a.prefixed else a.name in (name, WILDCARD))]

    @staticmethod
    def _covers(acl: Acl, op: AclOperation) -> bool:
        if acl.operation in (AclOperation.ALL, op):
            return True
        if not acl.allow:
            return False
        return (op == AclOperation.DESCRIBE and acl.operation in _DESCRIBE_IMPLIERS) or \
            (op == AclOperation.DESCRIBE_CONFIGS and acl.operation in _DESCRIBE_CONFIGS_IMPLIERS)

    def authorize(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
                  name: str) -> bool:
        self.calls += 1
        if principal in self.super_users:
            return True
        matching = [a for a in self._matching(principal, host, resource_type, name) if self._covers(a, operation)]
        if any(not a.allow for a in matching):
            return False
        if matching:
            return True
        return self.allow_if_no_acl

    def authorize_by_resource_type(self, principal: str, host: str, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        if principal in self.super_users:
            return True
        return any(a.allow and a.resource_type == resource_type and a.principal in (principal, "User:*")
                   and self._covers(a, operation) for a in self.acls)
