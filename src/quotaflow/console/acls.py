"""The console's ACL page and API, beside Quotas: list (with Kafka's filters), add, remove, and "may P do O on R, and
which ACL decides", all through :mod:`quotaflow.admin.acls` (what ``quotaflow acls`` and the gateway use).

``GET /api/acls`` lists (``resource_type``, ``name``, ``pattern_type`` ANY / MATCH / LITERAL / PREFIXED,
``principal``, ``host``, ``operation``, ``permission_type``: Kafka's DescribeAcls filter); ``POST /api/acls`` takes
``{"add": [binding...]}`` or ``{"remove": [binding...]}`` (exact bindings), admins only, same-origin JSON (the
Quotas API's rules); ``GET /api/acls/authorize`` decides. A binding is ``{"resource_type": "TOPIC", "name": "t",
"pattern_type": "LITERAL", "principal": "User:alice", "host": "*", "operation": "READ", "permission_type":
"ALLOW"}`` (Kafka's enum names). Validation errors are Kafka's (INVALID_REQUEST, per binding), HTTP 400.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from quotaflow.admin.acls import AclAdmin, explain, resolve
from quotaflow.console.api import MAX_BODY_BYTES, PAGE_HEADER, _same_origin, error_response
from quotaflow.console.state import console_of
from quotaflow.console.views import render
from quotaflow.core.acl import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    binding_filter,
    kafka_principal,
)
from quotaflow.core.authorizer import Decision
from quotaflow.core.errors import ClusterAuthorizationFailedError, InvalidRequestError, KafkaError
from quotaflow.store.base import AclStore

RESOURCE_TYPES: Final = [t.name for t in ResourceType if t not in (ResourceType.UNKNOWN, ResourceType.ANY)]
PATTERN_TYPES: Final = ["LITERAL", "PREFIXED"]
FILTER_PATTERN_TYPES: Final = ["ANY", "MATCH", "LITERAL", "PREFIXED"]
OPERATIONS: Final = [o.name for o in AclOperation if o not in (AclOperation.UNKNOWN, AclOperation.ANY)]
PAGE_ROWS: Final = 2000


def _enum(kind: Any, value: object, field: str) -> Any:
    try:
        return kind[str(value).strip().upper()]
    except KeyError:
        raise InvalidRequestError(f"Invalid {field} {value}") from None


def binding_to_json(b: AclBinding) -> dict[str, str]:
    p, e = b.pattern, b.entry
    return {"resource_type": p.resource_type.name, "name": p.name, "pattern_type": p.pattern_type.name,
            "principal": e.principal, "host": e.host, "operation": e.operation.name,
            "permission_type": e.permission_type.name}


def binding_from_json(doc: object) -> AclBinding:
    if not isinstance(doc, Mapping):
        raise InvalidRequestError("An ACL binding is a JSON object")
    try:
        return AclBinding(
            ResourcePattern(_enum(ResourceType, doc["resource_type"], "resourceType"), str(doc["name"]),
                            _enum(PatternType, doc.get("pattern_type", "LITERAL"), "patternType")),
            AccessControlEntry(str(doc["principal"]), str(doc.get("host", "*")),
                               _enum(AclOperation, doc["operation"], "operation"),
                               _enum(AclPermissionType, doc.get("permission_type", "ALLOW"), "permissionType")))
    except KeyError as e:
        raise InvalidRequestError(f"An ACL binding needs {e.args[0]}") from None


def filter_from_query(q: Mapping[str, str]) -> AclBindingFilter:
    """Kafka's DescribeAcls filter from query parameters; an empty one is ANY."""
    def opt(key: str) -> str | None:
        value = q.get(key, "").strip()
        return value or None

    rt, pt, op, perm = opt("resource_type"), opt("pattern_type"), opt("operation"), opt("permission_type")
    return AclBindingFilter(
        ResourcePatternFilter(_enum(ResourceType, rt, "resourceType") if rt else ResourceType.ANY, opt("name"),
                              _enum(PatternType, pt, "patternType") if pt else PatternType.ANY),
        AccessControlEntryFilter(opt("principal"), opt("host"),
                                 _enum(AclOperation, op, "operation") if op else AclOperation.ANY,
                                 _enum(AclPermissionType, perm, "permissionType") if perm else AclPermissionType.ANY))


def acl_admin(request: Request) -> AclAdmin:
    store = console_of(request).store
    if not isinstance(store, AclStore):
        raise InvalidRequestError("This store keeps no ACLs")
    return AclAdmin(store)


def decide(request: Request, q: Mapping[str, str]) -> tuple[Decision, str]:
    """The authorizer's decision for the query's principal, host, operation and resource. Super users: the
    console's ``--admin-principal`` list; ``allow_everyone=1`` sets allow.everyone.if.no.acl.found."""
    admin = acl_admin(request)
    principal = q.get("principal", "").strip()
    if ":" not in principal:
        raise InvalidRequestError("principal must be Type:name, e.g. User:alice")
    operation = _enum(AclOperation, q.get("operation", ""), "operation")
    resource_type = _enum(ResourceType, q.get("resource_type", ""), "resourceType")
    if operation == AclOperation.ANY or resource_type == ResourceType.ANY:
        raise InvalidRequestError("Decide for one operation on one resource")
    name = q.get("name", "")
    admins = console_of(request).config.admins or frozenset()
    supers = {kafka_principal(a) for a in admins}  # as the gateway's authorizer_settings makes them
    decision = resolve(admin.store, principal, q.get("host", "*").strip() or "*", operation, resource_type, name,
                       super_users=supers, allow_everyone_if_no_acl_found=q.get("allow_everyone") in ("1", "true"))
    return decision, explain(decision, principal, operation, resource_type, name)


def decision_to_json(decision: Decision, text: str) -> dict[str, Any]:
    return {"allowed": decision.allowed, "rule": decision.rule,
            "acl": None if decision.acl is None else binding_to_json(decision.acl), "text": text}


# -- the page -------------------------------------------------------------------------------------------------------

async def page(request: Request) -> Response:
    q = request.query_params
    error: str | None = None
    rows: list[dict[str, str]] = []
    total = 0
    verdict: dict[str, Any] | None = None
    try:
        admin = acl_admin(request)
        found = await run_in_threadpool(admin.describe, filter_from_query(q))
        total, rows = len(found), [binding_to_json(b) for b in found[:PAGE_ROWS]]
        if q.get("check"):  # the decision form's fields are check_*, so the listing's filter stays as it was
            asked = {k.removeprefix("check_"): v for k, v in q.items() if k.startswith("check_")}
            verdict = decision_to_json(*await run_in_threadpool(decide, request, asked))
    except KafkaError as e:
        error = f"{e.name}: {e}"
    context = {"rows": rows, "total": total, "error": error, "q": dict(q), "verdict": verdict,
               "resource_types": RESOURCE_TYPES, "pattern_types": PATTERN_TYPES,
               "filter_pattern_types": FILTER_PATTERN_TYPES, "operations": OPERATIONS}
    return await render(request, "acls.html", context, 400 if error else 200)


# -- the API --------------------------------------------------------------------------------------------------------

async def acls_get(request: Request) -> Response:
    try:
        admin = acl_admin(request)
        found = await run_in_threadpool(admin.describe, filter_from_query(request.query_params))
    except KafkaError as e:
        return error_response(e)
    return JSONResponse([binding_to_json(b) for b in found])


async def acls_post(request: Request) -> Response:
    console = console_of(request)
    if not _same_origin(request):
        return error_response(ClusterAuthorizationFailedError("Cross-origin writes are refused"))
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        return error_response(InvalidRequestError("POST /api/acls takes application/json"))
    try:
        await run_in_threadpool(console.access.require_admin, request.headers.get("authorization"))
    except KafkaError as e:
        return error_response(e, challenge=PAGE_HEADER not in request.headers)
    raw = bytearray()
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_BODY_BYTES:
            return error_response(InvalidRequestError(f"The request body is larger than {MAX_BODY_BYTES} bytes"))
    try:
        body = json.loads(raw)
        if not isinstance(body, dict) or len(body) != 1 or not ({"add", "remove"} & body.keys()):
            raise InvalidRequestError('The body is {"add": [binding...]} or {"remove": [binding...]}')
        action, docs = next(iter(body.items()))
        if not isinstance(docs, list):
            raise InvalidRequestError(f'"{action}" takes a list of bindings')
        bindings = [binding_from_json(d) for d in docs]
        admin = acl_admin(request)
    except (ValueError, RecursionError):
        return error_response(InvalidRequestError("The request body is not JSON"))
    except KafkaError as e:
        return error_response(e)
    if action == "add":
        results = await run_in_threadpool(admin.create, bindings)
        failed = [(b, r) for b, r in zip(bindings, results, strict=True) if not r.is_success]
        doc = {"results": [{"binding": binding_to_json(b), "error": None if r.is_success else
                            {"code": r.code, "name": r.name, "message": r.message}}
                           for b, r in zip(bindings, results, strict=True)]}
        if failed:
            return error_response(failed[0][1].exception(), doc)
        return JSONResponse(doc)
    deleted = await run_in_threadpool(admin.delete, [binding_filter(b) for b in bindings])
    return JSONResponse({"removed": [binding_to_json(b) for r in deleted for b in r.deleted]})


async def authorize(request: Request) -> Response:
    try:
        decision, text = await run_in_threadpool(decide, request, request.query_params)
    except KafkaError as e:
        return error_response(e)
    return JSONResponse(decision_to_json(decision, text))


PAGE_ROUTES: Final = [Route("/acls", page)]
API_ROUTES: Final = [
    Route("/api/acls", acls_get, methods=["GET"]),
    Route("/api/acls", acls_post, methods=["POST"]),
    Route("/api/acls/authorize", authorize),
]
