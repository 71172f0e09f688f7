"""DescribeAcls (29), CreateAcls (30) and DeleteAcls (31) answered by the gateway, as Kafka's
``AclApis`` answers them.

Order of checks, as Kafka's: a request naming an UNKNOWN (undefined) code cannot be parsed, so the connection is
closed; then ALTER (create, delete) or DESCRIBE (describe) on the CLUSTER (CLUSTER_AUTHORIZATION_FAILED; decided by
``authorize.cluster_allowed``: the authorizer, or without one the ``--admin-principal`` list); then, with no
authorizer configured, SECURITY_DISABLED ("No Authorizer is configured on the broker" / "No Authorizer is
configured."), as a broker without ``authorizer.class.name``; then a CreateAcls naming ANY / MATCH (which Kafka's
``AclBinding`` refuses to build) fails whole with UNKNOWN_SERVER_ERROR; then :mod:`quotaflow.admin.acls` decides.
After a change the gateway's own authorizer is reloaded at once (the others follow within
``quotaflow.store.poll.ms``). DescribeAcls and DeleteAcls are answered from the authorizer's index, first brought up
to the store's ACLs (the changes since the version it holds), never from a read of the store's whole set: a filter
naming a resource costs its answer, not the number of ACLs (``AclIndex.matching``); a DescribeAcls response is
written straight to bytes (``wire.acl_entries``). Without a store-backed authorizer the store's set is filtered
(``AclAdmin``). The work runs in an executor thread, with the GIL switch interval lowered and paced (it yields the
GIL and the CPU after each half millisecond of work: ``collector.Pace``); its CPU time is returned so the request
quota can charge it. With SASL passthrough the cluster authenticates and authorizes, so these APIs
are forwarded to it instead (``versions.PASSTHROUGH_APIS``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

from kafka.protocol.api_key import ApiKey

from quotaflow.admin.acls import AclAdmin
from quotaflow.core.acl import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    Authorizer,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    from_code,
)
from quotaflow.core.authorizer import AclIndex
from quotaflow.core.errors import (
    ClusterAuthorizationFailedError,
    InvalidRequestError,
    SecurityDisabledError,
    UnknownServerError,
)
from quotaflow.gateway.collector import Pace, collector_paused, drop_gradually, loop_first
from quotaflow.gateway.wire.acl_entries import encode_describe_acls_response
from quotaflow.gateway.wire.protocol import encode_response, response_class

_NO_AUTHORIZER_DESCRIBE = "No Authorizer is configured on the broker"
_NO_AUTHORIZER = "No Authorizer is configured."


def _codes(rt: int, pt: int, op: int, perm: int) -> tuple[ResourceType, PatternType, AclOperation,
                                                         AclPermissionType]:
    """Wire codes as enums; an UNKNOWN one makes the request unparsable (Kafka closes the connection)."""
    codes = (from_code(ResourceType, rt, ResourceType.UNKNOWN), from_code(PatternType, pt, PatternType.UNKNOWN),
             from_code(AclOperation, op, AclOperation.UNKNOWN),
             from_code(AclPermissionType, perm, AclPermissionType.UNKNOWN))
    if any(c.name == "UNKNOWN" for c in codes):
        raise InvalidRequestError(f"ACL request contains UNKNOWN elements: {rt}, {pt}, {op}, {perm}")
    return codes


def _filter(f: Any, pattern_type: int) -> AclBindingFilter:
    rt, pt, op, perm = _codes(f.resource_type_filter, pattern_type, f.operation, f.permission_type)
    return AclBindingFilter(ResourcePatternFilter(rt, f.resource_name_filter, pt),
                            AccessControlEntryFilter(f.principal_filter, f.host_filter, op, perm))


class AclAdminHandler:
    """The gateway's answers to the three ACL APIs. ``admin`` None: no authorizer is configured."""

    def __init__(self, admin: AclAdmin | None, authorizer: Authorizer | None, admins: frozenset[str] | None,
                 reload: Callable[[], None] | None = None, sync: Callable[[], AclIndex | None] | None = None) -> None:
        self.admin = admin if authorizer is not None else None
        self.authorizer = authorizer
        self.admins = admins
        self.reload = reload
        self.sync = sync
        """The index describes and deletes are answered from, brought up to date with the store first (the
        gateway's authorizer's, ``Gateway.synced_acl_index``); None, or it answering None (the authorizer's
        ACLs are not the store's): the store's whole set is read and filtered (:class:`AclAdmin`)."""

    def decode(self, api_key: int, request: Any) -> list[AclBindingFilter] | list[AclBinding | None]:
        """The filters (describe, delete) or bindings (create; None where Kafka cannot build the binding). Raise
        :class:`InvalidRequestError` (the connection closes) for what Kafka cannot parse."""
        if api_key == ApiKey.DescribeAcls:
            return [_filter(request, request.pattern_type_filter)]
        if api_key == ApiKey.DeleteAcls:
            return [_filter(f, f.pattern_type_filter) for f in request.filters]
        out: list[AclBinding | None] = []
        for c in request.creations:
            rt, pt, op, perm = _codes(c.resource_type, c.resource_pattern_type, c.operation, c.permission_type)
            if rt == ResourceType.ANY or pt in (PatternType.ANY, PatternType.MATCH) or op == AclOperation.ANY \
                    or perm == AclPermissionType.ANY:
                out.append(None)  # Kafka's AclBinding constructor throws: the whole request fails
            else:
                out.append(AclBinding(ResourcePattern(rt, c.resource_name, pt),
                                      AccessControlEntry(c.principal, c.host, op, perm)))
        return out

    async def handle(self, api_key: int, version: int, request: Any, allowed: bool,
                     correlation_id: int | None = None) -> tuple[Any, int]:
        """The response message for a decoded 29/30/31 request, and the executor thread time spent on it.
        ``allowed``: DESCRIBE (describe) / ALTER (create, delete) on the cluster, decided by the gateway's one
        cluster check (``authorize.cluster_allowed``), audited there. With ``correlation_id`` the response comes
        back encoded (the framed bytes), in the executor thread too: a describe of every ACL at 100,000 is never
        encoded on the event loop."""
        decoded = self.decode(api_key, request)

        def run() -> tuple[Any, int]:
            start = time.thread_time_ns()
            if api_key == ApiKey.CreateAcls:
                response = self.answer(api_key, version, decoded, allowed)
                if correlation_id is not None:
                    response = encode_response(response, version, correlation_id)
            else:
                # a describe (delete) may answer with every ACL: short-lived, acyclic objects, freed by reference
                # counting; the loop takes the GIL back within a millisecond whenever it wants it
                with collector_paused(), loop_first():
                    if correlation_id is not None and api_key == ApiKey.DescribeAcls and allowed \
                            and self.admin is not None:
                        [acl_filter] = decoded
                        assert isinstance(acl_filter, AclBindingFilter)
                        response = self.describe_encoded(version, acl_filter, correlation_id)
                    else:
                        response = self.answer(api_key, version, decoded, allowed)
                        if correlation_id is not None:
                            response = encode_response(response, version, correlation_id)
            return response, time.thread_time_ns() - start

        return await asyncio.get_running_loop().run_in_executor(None, run)

    def answer(self, api_key: int, version: int, decoded: Sequence[Any], allowed: bool) -> Any:
        cls = response_class(api_key, version)
        if not allowed:
            e: Any = ClusterAuthorizationFailedError()  # ApiError.fromThrowable: the generic error's message null
            return self._error(api_key, cls, decoded, e.errno, e.message)
        if self.admin is None:
            message = _NO_AUTHORIZER_DESCRIBE if api_key == ApiKey.DescribeAcls else _NO_AUTHORIZER
            return self._error(api_key, cls, decoded, SecurityDisabledError.errno, message)
        if api_key == ApiKey.DescribeAcls:
            [acl_filter] = decoded
            assert isinstance(acl_filter, AclBindingFilter)
            return self._describe(cls, acl_filter)
        if api_key == ApiKey.CreateAcls:
            bindings = [b for b in decoded if isinstance(b, AclBinding)]
            if len(bindings) != len(decoded):
                return self._error(api_key, cls, decoded, UnknownServerError.errno, None)
            results = self.admin.create(bindings)
            self._reload(any(r.is_success for r in results))
            return cls(throttle_time_ms=0, results=[cls.AclCreationResult(error_code=r.code, error_message=r.message)
                                                    for r in results])
        deleted = self.admin.delete([f for f in decoded if isinstance(f, AclBindingFilter)], self._index())
        self._reload(any(r.deleted for r in deleted))
        result = cls.DeleteAclsFilterResult
        return cls(throttle_time_ms=0, filter_results=[
            result(error_code=r.error.code, error_message=r.error.message,
                   matching_acls=[self._matching(result.DeleteAclsMatchingAcl, b) for b in r.deleted])
            for r in deleted])

    def _index(self) -> AclIndex | None:
        return None if self.sync is None else self.sync()

    def _reload(self, changed: bool) -> None:
        if changed and self.reload is not None:
            self.reload()

    def _describe(self, cls: Any, acl_filter: AclBindingFilter) -> Any:
        assert self.admin is not None
        by_pattern: dict[ResourcePattern, list[AccessControlEntry]] = {}
        found = self.admin.describe(acl_filter, self._index())
        for b in found:
            by_pattern.setdefault(b.pattern, []).append(b.entry)
        drop_gradually(found)
        res = cls.DescribeAclsResource
        return cls(throttle_time_ms=0, error_code=0, error_message=None, resources=[
            res(resource_type=int(p.resource_type), resource_name=p.name, pattern_type=int(p.pattern_type),
                acls=[res.AclDescription(principal=e.principal, host=e.host, operation=int(e.operation),
                                         permission_type=int(e.permission_type)) for e in entries])
            for p, entries in by_pattern.items()])

    def describe_encoded(self, version: int, acl_filter: AclBindingFilter, correlation_id: int,
                         pace: Callable[[], None] | None = None) -> bytes:
        """The framed DescribeAcls response, the same bytes as :meth:`_describe`'s message encoded, written from the
        bindings directly (:mod:`quotaflow.gateway.wire.acl_entries`: no message object per binding); every step
        (matching, sorting, encoding, freeing) in bounded pieces with ``pace`` called between them."""
        assert self.admin is not None
        pace = Pace() if pace is None else pace
        found = self.admin.describe(acl_filter, self._index(), pace)
        encoded = encode_describe_acls_response(version, correlation_id, found, pace=pace)
        drop_gradually(found, pace=pace)
        return encoded

    @staticmethod
    def _matching(cls: Any, b: AclBinding) -> Any:
        p, e = b.pattern, b.entry
        return cls(error_code=0, error_message=None, resource_type=int(p.resource_type), resource_name=p.name,
                   pattern_type=int(p.pattern_type), principal=e.principal, host=e.host, operation=int(e.operation),
                   permission_type=int(e.permission_type))

    @staticmethod
    def _error(api_key: int, cls: Any, decoded: Sequence[Any], code: int, message: str | None) -> Any:
        """The whole request refused with one error (Kafka's ``getErrorResponse``)."""
        if api_key == ApiKey.DescribeAcls:
            return cls(throttle_time_ms=0, error_code=code, error_message=message, resources=[])
        if api_key == ApiKey.CreateAcls:
            return cls(throttle_time_ms=0, results=[cls.AclCreationResult(error_code=code, error_message=message)
                                                    for _ in decoded])
        return cls(throttle_time_ms=0, filter_results=[
            cls.DeleteAclsFilterResult(error_code=code, error_message=message, matching_acls=[]) for _ in decoded])
