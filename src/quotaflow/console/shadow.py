"""The running shadow set beside the live view (issue 36), and promote / stop / rollback for an admin.

What is shown comes from two places: the store (the set, who started it and when, each change with the value the
store enforces now and the value the shadow evaluates; the last promotion) and the gateways' ``/metrics`` (per
quota-id, the live ``kafka_server_<type>_throttle_time`` beside the shadow managers'
``kafka_server_shadow_<type>_throttle_time`` and ``kafka_server_shadow_throttled_requests_total``, kept by
:class:`~quotaflow.console.live.LiveMetrics` within its bounds). The actions are ``quotaflow shadow``'s own
(:mod:`quotaflow.admin.shadow`: the same validation, the same store batch), recorded under the signed-in principal.
A promote or stop names the shadow the admin looked at (``shadow_id``): a set started since is not promoted blind.
"""

from __future__ import annotations

from typing import Any, Final

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from quotaflow.admin import shadow as shadow_admin
from quotaflow.admin.batch import current_values
from quotaflow.console.api import admin_write_request, error_response
from quotaflow.console.state import Console, console_of
from quotaflow.core.errors import CommandError, KafkaError, QuotaflowError, ShadowStateError
from quotaflow.store.base import QuotaStore

ACTIONS: Final = ("promote", "stop", "rollback")


def changes_view(store: QuotaStore, console: Console) -> dict[str, Any]:
    """The running set (None when none runs) with, per changed key, the enforced value and the shadow's (None:
    absent / removed), and the newest promotion or rollback. Blocking: store reads."""
    running = shadow_admin.status(store)
    promotions = shadow_admin.shadow_store(store).promotions()
    doc: dict[str, Any] = {"shadow": None, "changes": [],
                           "last_promotion": shadow_admin.promotion_json(promotions[-1]) if promotions else None}
    if running is None:
        return doc
    doc["shadow"] = shadow_admin.shadow_json(running)
    for entity, ops in running.changes:
        wire: dict[str | None, str | None] = {t: n for t, n in entity.to_wire().items()}
        enforced = current_values(console.admin, wire)
        for key, value in sorted(ops.items()):
            doc["changes"].append({"entity": entity.to_wire(), "key": key, "enforced": enforced.get(key),
                                   "shadow": value})  # fmt: skip
    return doc


async def shadow_get(request: Request) -> Response:
    """``GET /api/shadow``: the running set and its changes, the last promotion, and per quota-id the live vs shadow
    throttling of the running set (from the gateways' /metrics)."""
    console = console_of(request)
    try:
        doc = await run_in_threadpool(changes_view, console.store, console)
    except QuotaflowError as e:
        return _refusal(e)
    sid = doc["shadow"]["id"] if doc["shadow"] else None
    doc["entities"] = console.live.shadow_rows(sid) if sid is not None else []
    doc["gateways"] = list(console.live.gateways)
    return JSONResponse(doc)


def _refusal(error: QuotaflowError) -> JSONResponse:
    """One error shape for every refusal: Kafka's errors as the API maps them; a shadow state the store refuses
    (none running, a rollback over changed keys) 409; bad input (a grace out of range) 400."""
    if isinstance(error, KafkaError):
        return error_response(error)
    if isinstance(error, ShadowStateError):
        return JSONResponse({"error": {"code": None, "name": "CONFLICT", "message": str(error)}}, status_code=409)
    name = "INVALID_REQUEST" if isinstance(error, CommandError) else type(error).__name__
    return JSONResponse({"error": {"code": None, "name": name, "message": str(error)}}, status_code=400)


def _grace(body: dict[str, Any]) -> float:
    grace = body.get("in_s", shadow_admin.DEFAULT_GRACE_S)
    if isinstance(grace, bool) or not isinstance(grace, int | float):
        raise CommandError("in_s must be a number of seconds")
    return float(grace)


def act(store: QuotaStore, action: str, by: str, body: dict[str, Any]) -> dict[str, Any]:
    """Run one action as ``quotaflow shadow <action>`` does, as principal ``by``. Blocking: store writes."""
    if action == "rollback":
        force = body.get("force", False)
        if not isinstance(force, bool):
            raise CommandError("force must be true or false")
        return {"promotion": shadow_admin.promotion_json(shadow_admin.rollback(store, by, _grace(body), force=force))}
    expected = body.get("shadow_id")
    if isinstance(expected, bool) or not isinstance(expected, int):
        raise CommandError("shadow_id must name the running shadow set you are acting on")
    running = shadow_admin.status(store)
    if running is None:
        raise ShadowStateError(f"no shadow set is running: nothing to {action}")
    if running.id != expected:
        raise ShadowStateError(f"shadow set {expected} is no longer the running one: {running.name!r} "
                               f"(id {running.id}) is; reload and look at it first")
    if action == "stop":
        return {"shadow": shadow_admin.shadow_json(shadow_admin.stop(store, by))}
    return {"promotion": shadow_admin.promotion_json(shadow_admin.promote(store, by, _grace(body)))}


async def shadow_post(request: Request) -> Response:
    """``POST /api/shadow/{promote|stop|rollback}``: admins only, like every write (same-origin JSON, HTTP Basic,
    the admin list, not read-only)."""
    console, action = console_of(request), request.path_params["action"]
    if action not in ACTIONS:
        return error_response(CommandError(f"no shadow action {action!r} (one of {', '.join(ACTIONS)})"))
    body, principal, refused = await admin_write_request(request, f"/api/shadow/{action}")
    if refused is not None:
        return refused
    if not isinstance(body, dict):
        return _refusal(CommandError('Expected a JSON object, e.g. {"shadow_id": 12, "in_s": 5}'))
    assert principal is not None
    try:
        doc = await run_in_threadpool(act, console.store, action, principal.name, body)
    except QuotaflowError as e:
        return _refusal(e)
    doc["seq"] = await run_in_threadpool(console.store.last_seq)
    return JSONResponse(doc)


API_ROUTES: Final = [
    Route("/api/shadow", shadow_get, methods=["GET"]),
    Route("/api/shadow/{action}", shadow_post, methods=["POST"]),
]
