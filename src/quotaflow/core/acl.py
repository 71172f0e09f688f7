"""Kafka's ACL vocabulary, with Kafka's wire codes, and the one question the gateway asks of an authorizer.

The codes are the ones CreateAcls / DescribeAcls / DeleteAcls carry (``org.apache.kafka.common.resource`` and
``org.apache.kafka.common.acl``), so a decoded request maps onto these enums without a table. The decision itself
(super users, deny before allow, prefixed and wildcard patterns, implied operations) lives in the authorizer that
implements :class:`Authorizer`; the gateway's per-API checks depend only on this protocol.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Final, Protocol

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


class Authorizer(Protocol):
    """What the gateway's per-API checks ask. ``principal`` is Kafka's form (``User:alice``), ``host`` the client's
    IP address string. Implementations answer from memory (no I/O on the request path)."""

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
