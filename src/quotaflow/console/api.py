"""The JSON API under ``/api``, which the pages use themselves (docs/console.md lists it).

Errors are Kafka's: a bad filter or alteration is HTTP 400 with Kafka's code, name and message (and nothing is
written); no or wrong credentials 401 (with an HTTP Basic challenge, unless the console's own page asked); not an
admin, or a read-only console, 403; an unknown backtest or series 404; an unknown route or method 404 / 405, all in
one ``{"error": {"code", "name", "message"}}`` shape.
"""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any, Final
from urllib.parse import urlsplit

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

import quotaflow.console.backtests as bt
from quotaflow.admin import Alteration
from quotaflow.admin.codec import alter_to_json, describe_to_json, resolution_to_json
from quotaflow.console import proposals
from quotaflow.console.access import REALM, Principal
from quotaflow.console.quotas import field_of, filter_form, op_keys, parse_alteration
from quotaflow.console.state import Console, console_of
from quotaflow.core.errors import (
    ClusterAuthorizationFailedError,
    CommandError,
    InvalidRequestError,
    KafkaError,
    SaslAuthenticationFailedError,
)

MAX_BODY_BYTES: Final = 64 * 1024
PAGE_HEADER: Final = "x-quotaflow-page"  # sent by the console's own page: it offers its sign-in link on a 401


def _status(error: Exception) -> int:
    if isinstance(error, SaslAuthenticationFailedError):
        return 401
    if isinstance(error, ClusterAuthorizationFailedError):
        return 403
    if isinstance(error, CommandError):
        return 404
    return 400


def error_response(
    error: KafkaError | CommandError, extra: dict[str, Any] | None = None, *, challenge: bool = True
) -> JSONResponse:
    """``{"error": {"code", "name", "message"}, **extra}`` with the status the error calls for."""
    if isinstance(error, KafkaError):
        doc: dict[str, Any] = {"code": error.errno, "name": error.name, "message": str(error)}
    else:
        doc = {"code": None, "name": "NOT_FOUND", "message": str(error)}
    challenge = challenge and isinstance(error, SaslAuthenticationFailedError)
    headers = {"WWW-Authenticate": f'Basic realm="{REALM}"'} if challenge else None
    return JSONResponse({"error": doc, **(extra or {})}, status_code=_status(error), headers=headers)


async def http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own 404 / 405 (no such route or method): JSON in the API's error shape under ``/api``, its plain
    text elsewhere."""
    assert isinstance(exc, HTTPException)
    if not request.url.path.startswith("/api/"):
        return PlainTextResponse(exc.detail, exc.status_code, headers=exc.headers)
    name = HTTPStatus(exc.status_code).name
    return JSONResponse({"error": {"code": None, "name": name, "message": f"{request.method} {request.url.path}: "
                                   f"{exc.detail}"}}, exc.status_code, headers=exc.headers)


def _same_origin(request: Request) -> bool:
    """Writes from another site's page are refused: a browser always sends Origin on a cross-site POST."""
    origin = request.headers.get("origin")
    return origin is None or urlsplit(origin).netloc == request.headers.get("host")


async def quotas_get(request: Request) -> Response:
    console = console_of(request)
    try:
        form = filter_form(request.query_params)
        found = await run_in_threadpool(console.admin.describe, form.to_filter())
    except KafkaError as e:
        return error_response(e)
    return JSONResponse(describe_to_json(found))


async def _json_body(request: Request) -> Any:
    """The request's JSON body, reading at most MAX_BODY_BYTES whatever Content-Length says."""
    raw = bytearray()
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_BODY_BYTES:
            raise InvalidRequestError(f"The request body is larger than {MAX_BODY_BYTES} bytes")
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: arrays or objects nested too deep to decode
        raise InvalidRequestError("The request body is not JSON") from None


async def admin_write_request(request: Request, route: str) -> tuple[Any, Principal | None, Response | None]:
    """(the JSON body, the admin, None) of a write an admin may make, else (None, None, the refusal): a cross-site
    page, a body that is not JSON, no admin signed in, a read-only console."""
    console = console_of(request)
    if not _same_origin(request):
        return None, None, error_response(ClusterAuthorizationFailedError("Cross-origin writes are refused"))
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        return None, None, error_response(InvalidRequestError(f"POST {route} takes application/json"))
    try:
        principal = await console.authenticate(console.access.require_admin, request)
    except KafkaError as e:
        return None, None, error_response(e, challenge=PAGE_HEADER not in request.headers)
    try:
        return await _json_body(request), principal, None
    except InvalidRequestError as e:
        return None, None, error_response(e)


async def _admin_write(request: Request, route: str) -> tuple[Any, Response | None]:
    body, _principal, refused = await admin_write_request(request, route)
    return body, refused


async def quotas_post(request: Request) -> Response:
    console = console_of(request)
    body, refused = await _admin_write(request, "/api/quotas")
    if refused is not None:
        return refused
    try:
        alteration, validate_only = parse_alteration(body)
    except InvalidRequestError as e:
        return error_response(e, {"field": field_of(e.message, op_keys(body))})
    return await _alter(console, alteration, validate_only)


async def _alter(console: Console, alteration: Alteration, validate_only: bool) -> Response:
    results = await run_in_threadpool(console.admin.alter, [alteration], validate_only)
    doc: dict[str, Any] = {"validate_only": validate_only, "results": alter_to_json(results)}
    failed = next((r for r in results if not r.ok), None)
    if failed is not None:
        error = failed.error.exception()
        return error_response(error, {**doc, "field": field_of(error.message, [op.key for op in alteration.ops])})
    if not validate_only:
        doc["seq"] = await run_in_threadpool(console.store.last_seq)
    return JSONResponse(doc)


async def resolve(request: Request) -> Response:
    console, q = console_of(request), request.query_params
    try:
        if "ip" in q:
            if "user" in q or "client-id" in q:
                raise InvalidRequestError("Resolve takes ?ip= alone, or ?user=&client-id=")
            res = await run_in_threadpool(console.resolve_ip, q["ip"])
        else:
            if "user" not in q or "client-id" not in q:
                raise InvalidRequestError("Resolve needs ?user=&client-id= (a client has both) or ?ip=")
            res = await run_in_threadpool(console.resolve, q["user"], q["client-id"])
    except KafkaError as e:
        return error_response(e)
    return JSONResponse(resolution_to_json(res))


async def whoami(request: Request) -> Response:
    console = console_of(request)
    try:
        principal = await console.authenticate(console.access.principal, request)
    except KafkaError as e:
        return error_response(e)
    return JSONResponse(
        {
            "principal": None if principal is None else principal.name,
            "admin": principal is not None and principal.admin and not console.config.read_only,
            "read_only": console.config.read_only,
        }
    )


async def live(request: Request) -> Response:
    console = console_of(request)
    index = await run_in_threadpool(console.index)  # a rebuild after a store change reads a whole snapshot
    return JSONResponse(console.live.snapshot(index=index))


async def live_history(request: Request) -> Response:
    history = console_of(request).live.history_of(request.query_params.get("id", ""))
    if history is None:
        return error_response(CommandError("no such live series"))
    return JSONResponse(history)


async def backtests(request: Request) -> Response:
    return JSONResponse(await run_in_threadpool(bt.listings, console_of(request).config.backtests))


async def backtest(request: Request) -> Response:
    try:
        doc = await run_in_threadpool(console_of(request).describe_backtest, request.path_params["id"])
    except CommandError as e:
        return error_response(e)
    return JSONResponse(doc)


async def backtest_windows(request: Request) -> Response:
    console, q = console_of(request), request.query_params
    try:
        found = await run_in_threadpool(console.backtest, q.get("id", ""))
        doc = await run_in_threadpool(
            bt.entity_windows, found, q.get("broker", ""), q.get("quota_type", ""), q.get("user", ""),
            q.get("client_id", ""),
        )
    except CommandError as e:
        return error_response(e)
    return JSONResponse(doc)


async def apply_proposal(request: Request) -> Response:
    """``POST /api/proposals/{id}`` ``{"entries": [i, ...] | null, "validate_only": bool, "confirm_store": str}``:
    apply entries of a recommend output's proposal.json (each entity all-or-nothing); admins only, like every
    write; a proposal computed from another store only with ``confirm_store`` naming the console's store."""
    console = console_of(request)
    body, refused = await _admin_write(request, "/api/proposals")
    if refused is not None:
        return refused
    if not isinstance(body, dict) or not isinstance(body.get("validate_only", False), bool):
        return error_response(InvalidRequestError('Expected {"entries": [index, ...] | null, "validate_only": bool}'))
    entries = body.get("entries")
    if entries is not None and not isinstance(entries, list):
        return error_response(InvalidRequestError("entries must be a list of indexes, or null for all"))
    validate_only = bool(body.get("validate_only", False))
    confirm = body.get("confirm_store")
    if confirm is not None and not isinstance(confirm, str):
        return error_response(InvalidRequestError("confirm_store must be the console's store, as a string"))
    try:
        found = await run_in_threadpool(console.backtest, request.path_params["id"])
        done = await run_in_threadpool(proposals.apply_entries, found, console.admin, entries, validate_only,
                                       console.store_id, confirm)  # fmt: skip
    except (CommandError, KafkaError) as e:
        return error_response(e)
    doc: dict[str, Any] = {"validate_only": validate_only, "results": done,
                           "failed": sum(r["error"] is not None for r in done)}  # fmt: skip
    if not validate_only:
        doc["seq"] = await run_in_threadpool(console.store.last_seq)
    return JSONResponse(doc)


ROUTES: Final = [
    Route("/api/quotas", quotas_get, methods=["GET"]),
    Route("/api/quotas", quotas_post, methods=["POST"]),
    Route("/api/resolve", resolve),
    Route("/api/whoami", whoami),
    Route("/api/live", live),
    Route("/api/live/history", live_history),
    Route("/api/backtests", backtests),
    Route("/api/backtest-windows", backtest_windows),
    Route("/api/backtests/{id:path}", backtest),
    Route("/api/proposals/{id:path}", apply_proposal, methods=["POST"]),
]
