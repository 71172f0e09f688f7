"""DescribeAcls responses encoded directly (``gateway.wire.acl_entries``) are the bytes kafka-python's generic encoder
gives for the message the gateway built before (:meth:`AclAdminHandler.answer`), at v1 and the flexible v2 / v3, with
the bindings grouped by pattern in ``sort_bindings`` order, whatever the chunk size of the joins."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.api_key import ApiKey

from quotaflow.admin.acls import AclAdmin
from quotaflow.core.acl import (
    ANY_FILTER,
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from quotaflow.core.authorizer import AclIndex, StandardAuthorizer
from quotaflow.gateway.auth.acl_admin import AclAdminHandler
from quotaflow.gateway.wire import acl_entries
from quotaflow.gateway.wire.protocol import decode_response, encode_response

names = st.text(min_size=1, max_size=40) | st.sampled_from(["*", "t", "t-1", "pay-"])
bindings = st.sets(st.builds(
    lambda rt, name, pt, principal, host, op, perm: AclBinding(ResourcePattern(rt, name, pt),
                                                               AccessControlEntry(principal, host, op, perm)),
    st.sampled_from([ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID,
                     ResourceType.DELEGATION_TOKEN, ResourceType.USER]),
    names, st.sampled_from([PatternType.LITERAL, PatternType.PREFIXED]),
    st.sampled_from(["User:a", "User:*", "User:ünïcode"]) | st.text(max_size=20).map(lambda s: f"User:{s}"),
    st.sampled_from(["*", "10.0.0.1", "0:0:0:0:0:0:0:1"]),
    st.sampled_from([op for op in AclOperation if op not in (AclOperation.UNKNOWN, AclOperation.ANY)]),
    st.sampled_from([AclPermissionType.ALLOW, AclPermissionType.DENY])), max_size=40)


def _handler(held: set[AclBinding]) -> AclAdminHandler:
    index = AclIndex(held)
    authorizer = StandardAuthorizer({"User:admin"})
    authorizer.load(index)
    # the index answers; a store is never asked
    return AclAdminHandler(AclAdmin(None), authorizer, None, sync=lambda: index)  # type: ignore[arg-type]


@settings(max_examples=150, deadline=None)
@given(st.sampled_from([1, 2, 3]), st.integers(-(2**31), 2**31 - 1), bindings, st.sampled_from([1, 2, 1000]))
def test_same_bytes_as_kafka_pythons_encoder(version: int, correlation_id: int, held: set[AclBinding],
                                             join: int) -> None:
    h = _handler(held)
    generic = encode_response(h.answer(ApiKey.DescribeAcls, version, [ANY_FILTER], True), version, correlation_id)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(acl_entries, "JOIN_ENTRIES", join)
        ours = h.describe_encoded(version, ANY_FILTER, correlation_id)
    assert ours == generic
    back = decode_response(ours[4:], ApiKey.DescribeAcls, version)
    got = {AclBinding(ResourcePattern(ResourceType(r.resource_type), r.resource_name, PatternType(r.pattern_type)),
                      AccessControlEntry(a.principal, a.host, AclOperation(a.operation),
                                         AclPermissionType(a.permission_type)))
           for r in back.resources for a in r.acls}
    assert got == held
    assert len(back.resources) == len({b.pattern for b in held})
