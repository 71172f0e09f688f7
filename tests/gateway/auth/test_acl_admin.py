"""The gateway's ACL API answers, decoded by kafka-python's own message classes: Kafka's order of checks (unparsable
codes close the connection; cluster authorization; SECURITY_DISABLED without an authorizer; ANY / MATCH in a
creation fails the whole request), per-binding results, DescribeAcls grouped by resource pattern, and the reload
hook after a change."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.admin import CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest
from kafka.protocol.api_key import ApiKey

from quotaflow.admin.acls import AclAdmin
from quotaflow.core.acl import AclOperation, ResourceType
from quotaflow.core.authorizer import StandardAuthorizer
from quotaflow.core.errors import InvalidRequestError
from quotaflow.gateway.auth import authorize
from quotaflow.gateway.auth.acl_admin import AclAdminHandler
from quotaflow.gateway.auth.hidden_topics import HiddenTopics
from quotaflow.store.sqlite import SqliteStore

TOPIC, GROUP, CLUSTER, ANY = 2, 3, 4, 1
LITERAL, PREFIXED, MATCH = 3, 4, 2
READ, ALTER, DESCRIBE, ANY_OP = 3, 7, 8, 1
ALLOW, DENY, ANY_PERM = 3, 2, 1


def creation(rt: int = TOPIC, name: str = "t", pt: int = LITERAL, principal: str = "User:bob", host: str = "*",
             op: int = READ, perm: int = ALLOW) -> Any:
    return CreateAclsRequest.AclCreation(resource_type=rt, resource_name=name, resource_pattern_type=pt,
                                         principal=principal, host=host, operation=op, permission_type=perm)


def delete_filter(rt: int = ANY, name: str | None = None, pt: int = 1, principal: str | None = None) -> Any:
    return DeleteAclsRequest.DeleteAclsFilter(resource_type_filter=rt, resource_name_filter=name,
                                              pattern_type_filter=pt, principal_filter=principal, host_filter=None,
                                              operation=ANY_OP, permission_type=ANY_PERM)


def describe(rt: int = ANY, name: str | None = None, pt: int = 1) -> Any:
    return DescribeAclsRequest(resource_type_filter=rt, resource_name_filter=name, pattern_type_filter=pt,
                               principal_filter=None, host_filter=None, operation=ANY_OP, permission_type=ANY_PERM)


@dataclass
class _Admins:
    admins: frozenset[str] | None


class _Gateway:
    def __init__(self, access: authorize.Access, admins: frozenset[str] | None) -> None:
        self.access = access
        self.quota_admin = _Admins(admins)


class _Scope:
    """What ``authorize.cluster_allowed`` reads of a connection (the gateway's one cluster check)."""

    def __init__(self, principal: str, access: authorize.Access, admins: frozenset[str] | None) -> None:
        self.principal = principal
        self.gateway = _Gateway(access, admins)


class Handler:
    def __init__(self, tmp: Path, *, authorizer: bool = True, admins: frozenset[str] | None = None) -> None:
        self.store = SqliteStore(tmp / "acls.db")
        self.authorizer = StandardAuthorizer({"User:admin"}) if authorizer else None
        self.reloads = 0
        self.handler = AclAdminHandler(AclAdmin(self.store), self.authorizer, admins, reload=self._reload)
        self.access = authorize.Access(self.authorizer, HiddenTopics(set()))

    def _reload(self) -> None:
        self.reloads += 1
        assert self.authorizer is not None
        self.authorizer.load(self.store.acls().bindings)

    def call(self, key: int, request: Any, principal: str = "admin", version: int = 3) -> Any:
        scope = _Scope(principal, self.access, self.handler.admins)
        op = AclOperation.DESCRIBE if key == ApiKey.DescribeAcls else AclOperation.ALTER
        allowed = authorize.cluster_allowed(self.access, scope, key, "10.0.0.1", op)  # type: ignore[arg-type]
        response, _ns = asyncio.run(self.handler.handle(key, version, request, allowed))
        return response


@pytest.fixture
def h(tmp_path: Path) -> Handler:
    return Handler(tmp_path)


def test_create_describe_delete_round_trip(h: Handler) -> None:
    r = h.call(ApiKey.CreateAcls, CreateAclsRequest(creations=[
        creation(), creation(op=DESCRIBE), creation(rt=GROUP, name="g", pt=PREFIXED),
        creation(rt=CLUSTER, name="c"), creation(name="")]))
    assert [(x.error_code, x.error_message) for x in r.results] == [
        (0, None), (0, None), (0, None),
        (42, "The only valid name for the CLUSTER resource is kafka-cluster"),
        (42, "Invalid empty resource name")]
    assert h.reloads == 1 and h.authorizer is not None
    assert h.authorizer.authorize("User:bob", "10.0.0.1", AclOperation.READ, ResourceType.TOPIC, "t")
    d = h.call(ApiKey.DescribeAcls, describe())
    assert d.error_code == 0
    assert [(res.resource_type, res.resource_name, res.pattern_type, [(a.principal, a.operation) for a in res.acls])
            for res in d.resources] == [(TOPIC, "t", LITERAL, [("User:bob", READ), ("User:bob", DESCRIBE)]),
                                        (GROUP, "g", PREFIXED, [("User:bob", READ)])]
    m = h.call(ApiKey.DescribeAcls, describe(GROUP, "growth", MATCH))
    assert [res.resource_name for res in m.resources] == ["g"]
    x = h.call(ApiKey.DeleteAcls, DeleteAclsRequest(filters=[delete_filter(TOPIC, "t", LITERAL),
                                                             delete_filter(GROUP, "nope", LITERAL)]))
    assert [(f.error_code, [(a.resource_name, a.operation) for a in f.matching_acls]) for f in x.filter_results] == [
        (0, [("t", READ), ("t", DESCRIBE)]), (0, [])]
    assert h.reloads == 2
    assert not h.authorizer.authorize("User:bob", "10.0.0.1", AclOperation.READ, ResourceType.TOPIC, "t")


def test_non_admin_gets_cluster_authorization_failed_and_nothing_changes(h: Handler) -> None:
    # each request's getErrorResponse: ApiError.fromThrowable sends the generic error's message as null
    r = h.call(ApiKey.CreateAcls, CreateAclsRequest(creations=[creation(), creation()]), principal="bob")
    assert [(x.error_code, x.error_message) for x in r.results] == [(31, None), (31, None)]
    described = h.call(ApiKey.DescribeAcls, describe(), principal="bob")
    assert (described.error_code, described.error_message, described.resources) == (31, None, [])
    x = h.call(ApiKey.DeleteAcls, DeleteAclsRequest(filters=[delete_filter()]), principal="bob")
    assert [(f.error_code, f.error_message, f.matching_acls) for f in x.filter_results] == [(31, None, [])]
    assert h.store.acls().bindings == frozenset() and h.reloads == 0


def test_describe_on_the_cluster_lets_a_principal_list_but_not_change(h: Handler) -> None:
    h.call(ApiKey.CreateAcls, CreateAclsRequest(creations=[creation(rt=CLUSTER, name="kafka-cluster",
                                                                    principal="User:auditor", op=DESCRIBE)]))
    assert h.call(ApiKey.DescribeAcls, describe(), principal="auditor").error_code == 0
    r = h.call(ApiKey.CreateAcls, CreateAclsRequest(creations=[creation()]), principal="auditor")
    assert [x.error_code for x in r.results] == [31]


def test_any_or_match_in_a_creation_fails_the_whole_request(h: Handler) -> None:
    r = h.call(ApiKey.CreateAcls, CreateAclsRequest(creations=[creation(), creation(pt=MATCH)]))
    assert [(x.error_code, x.error_message) for x in r.results] == [(-1, None), (-1, None)]
    r = h.call(ApiKey.CreateAcls, CreateAclsRequest(creations=[creation(op=ANY_OP)]))
    assert [x.error_code for x in r.results] == [-1]
    assert h.store.acls().bindings == frozenset()


@pytest.mark.parametrize("bad", [creation(rt=0), creation(pt=0), creation(op=0), creation(perm=0), creation(rt=99)])
def test_unknown_codes_cannot_be_parsed(h: Handler, bad: Any) -> None:
    with pytest.raises(InvalidRequestError):  # the connection closes (CLOSE_ON_INVALID)
        h.call(ApiKey.CreateAcls, CreateAclsRequest(creations=[bad]))


def test_without_an_authorizer_security_disabled(tmp_path: Path) -> None:
    h = Handler(tmp_path, authorizer=False)
    d = h.call(ApiKey.DescribeAcls, describe(), principal="anyone")
    assert (d.error_code, d.error_message) == (54, "No Authorizer is configured on the broker")
    r = h.call(ApiKey.CreateAcls, CreateAclsRequest(creations=[creation()]), principal="anyone")
    assert [(x.error_code, x.error_message) for x in r.results] == [(54, "No Authorizer is configured.")]
    # with an --admin-principal list, a non-admin is refused first (the cluster check runs before)
    h2 = Handler(tmp_path, authorizer=False, admins=frozenset({"admin"}))
    assert h2.call(ApiKey.DescribeAcls, describe(), principal="bob").error_code == 31
    assert h2.call(ApiKey.DescribeAcls, describe(), principal="admin").error_code == 54
