"""The ACL API over the Kafka protocol: :class:`WireAclAdmin` sends CreateAcls / DescribeAcls / DeleteAcls to a
quotaflow gateway or a Kafka broker (``quotaflow acls --bootstrap-server``, as ``kafka-acls.sh`` does), and answers
like :class:`~quotaflow.admin.acls.AclAdmin`, so the CLI runs against either."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kafka.protocol.admin import CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest
from kafka.protocol.api_key import ApiKey

from quotaflow.admin.acls import AclDeleteResult
from quotaflow.admin.wire import (
    DEFAULT_TIMEOUT_S,
    KafkaWireConnection,
    error_for,
    parse_bootstrap,
    sasl_from_properties,
)
from quotaflow.core.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    from_code,
)
from quotaflow.core.errors import ApiError


def _binding(rt: int, name: str, pt: int, principal: str, host: str, op: int, perm: int) -> AclBinding:
    return AclBinding(ResourcePattern(from_code(ResourceType, rt, ResourceType.UNKNOWN), name,
                                      from_code(PatternType, pt, PatternType.UNKNOWN)),
                      AccessControlEntry(principal, host, from_code(AclOperation, op, AclOperation.UNKNOWN),
                                         from_code(AclPermissionType, perm, AclPermissionType.UNKNOWN)))


def _filter_fields(f: AclBindingFilter) -> dict[str, Any]:
    p, e = f.pattern_filter, f.entry_filter
    return {"resource_type_filter": int(p.resource_type), "resource_name_filter": p.name,
            "pattern_type_filter": int(p.pattern_type), "principal_filter": e.principal, "host_filter": e.host,
            "operation": int(e.operation), "permission_type": int(e.permission_type)}


class WireAclAdmin:
    """Create / describe / delete ACL bindings through a gateway or broker."""

    def __init__(self, bootstrap: str, props: Mapping[str, str] | None = None,
                 timeout: float = DEFAULT_TIMEOUT_S) -> None:
        host, port = parse_bootstrap(bootstrap)
        self.conn = KafkaWireConnection(host, port, sasl=sasl_from_properties(props or {}), timeout=timeout)

    def create(self, bindings: Sequence[AclBinding]) -> list[ApiError]:
        version = self.conn.version_for(ApiKey.CreateAcls, int(CreateAclsRequest.max_version))
        cls = CreateAclsRequest[version]
        creations = [cls.AclCreation(resource_type=int(b.pattern.resource_type), resource_name=b.pattern.name,
                                     resource_pattern_type=int(b.pattern.pattern_type), principal=b.entry.principal,
                                     host=b.entry.host, operation=int(b.entry.operation),
                                     permission_type=int(b.entry.permission_type)) for b in bindings]
        response = self.conn.send(cls(creations=creations))
        return [ApiError(int(r.error_code), r.error_message) for r in response.results]

    def describe(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        version = self.conn.version_for(ApiKey.DescribeAcls, int(DescribeAclsRequest.max_version))
        response = self.conn.send(DescribeAclsRequest[version](**_filter_fields(acl_filter)))
        if response.error_code != 0:
            raise error_for(int(response.error_code), response.error_message)
        return [_binding(r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host, a.operation,
                         a.permission_type) for r in response.resources for a in r.acls]

    def delete(self, filters: Sequence[AclBindingFilter]) -> list[AclDeleteResult]:
        version = self.conn.version_for(ApiKey.DeleteAcls, int(DeleteAclsRequest.max_version))
        cls = DeleteAclsRequest[version]
        response = self.conn.send(cls(filters=[cls.DeleteAclsFilter(**_filter_fields(f)) for f in filters]))
        return [AclDeleteResult(ApiError(int(r.error_code), r.error_message),
                                tuple(_binding(m.resource_type, m.resource_name, m.pattern_type, m.principal, m.host,
                                               m.operation, m.permission_type) for m in r.matching_acls))
                for r in response.filter_results]

    def close(self) -> None:
        self.conn.close()
