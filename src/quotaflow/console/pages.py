"""The HTML pages: Quotas, Resolve, Live, Backtests (and one backtest), the report's files, sign-in."""

from __future__ import annotations

from typing import Any, Final

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

import quotaflow.console.backtests as bt
from quotaflow.admin import DescribedEntity
from quotaflow.admin.codec import describe_to_json, resolution_to_json
from quotaflow.admin.shadow import DEFAULT_GRACE_S
from quotaflow.console.access import REALM
from quotaflow.console.api import error_response
from quotaflow.console.headers import REPORT_CSP
from quotaflow.console.quotas import ENTITY_TYPES, MATCHES, QUOTA_KEYS, FilterForm, filter_form
from quotaflow.console.state import console_of
from quotaflow.console.views import render, utc
from quotaflow.core.errors import CommandError, KafkaError

PAGE_ROWS: Final = 1000  # the Quotas page lists this many entities at most (the API returns every match)


async def home(request: Request) -> Response:
    return RedirectResponse("/quotas", status_code=303)


async def quotas(request: Request) -> Response:
    console = console_of(request)
    form: FilterForm | None = None
    error: str | None = None
    described: list[DescribedEntity] = []
    try:
        form = filter_form(request.query_params)
        described = await run_in_threadpool(console.admin.describe, form.to_filter())
    except KafkaError as e:  # a bad filter: Kafka's message, and the form as far as it parsed
        error = f"{e.name}: {e}"
    context = {"form": form or filter_form({}), "rows": describe_to_json(described[:PAGE_ROWS]),
               "total": len(described), "error": error, "entity_types": ENTITY_TYPES, "matches": MATCHES,
               "quota_keys": QUOTA_KEYS}
    return await render(request, "quotas.html", context, 400 if error else 200)


async def resolve(request: Request) -> Response:
    console, q = console_of(request), request.query_params
    doc: dict[str, Any] | None = None
    error: str | None = None
    try:  # a partial query (a link from a user-only entity) just fills the form
        if q.get("ip"):
            doc = resolution_to_json(await run_in_threadpool(console.resolve_ip, q["ip"]))
        elif "user" in q and "client-id" in q:
            doc = resolution_to_json(await run_in_threadpool(console.resolve, q["user"], q["client-id"]))
    except KafkaError as e:
        error = f"{e.name}: {e}"
    context = {"doc": doc, "error": error, "q": {k: q.get(k, "") for k in ENTITY_TYPES}}
    return await render(request, "resolve.html", context, 400 if error else 200)


async def live(request: Request) -> Response:
    """Live throttling, with a running shadow set beside it (promote / stop / rollback offered to an admin)."""
    console = console_of(request)
    principal = await console.principal(request)
    may_act = principal is not None and principal.admin and not console.config.read_only
    return await render(request, "live.html", {"interval_s": console.live.interval_s, "may_act": may_act,
                                               "default_grace_s": DEFAULT_GRACE_S})


async def backtests(request: Request, error: str | None = None, status: int = 200) -> Response:
    """The outputs under ``--backtests``; with ``error`` (an unknown id), the same list under the message."""
    root = console_of(request).config.backtests
    rows = await run_in_threadpool(bt.listings, root)
    return await render(request, "backtests.html", {"backtests": rows, "root": root, "error": error}, status)


async def backtest(request: Request) -> Response:
    try:
        doc = await run_in_threadpool(console_of(request).describe_backtest, request.path_params["id"])
    except CommandError as e:
        return await backtests(request, str(e), 404)
    span = doc["span_ms"]
    return await render(
        request, "backtest.html", {"bt": doc, "span": None if span is None else (utc(span["first"]), utc(span["last"]))}
    )


async def report_file(request: Request) -> Response:
    """``report.html`` or one of its PNG charts, only from the report next to a discovered backtest."""
    console, q = console_of(request), request.query_params
    try:
        found = await run_in_threadpool(console.backtest, q.get("id", ""))
    except CommandError as e:
        return error_response(e)
    rdir = bt.report_dir(found)
    name = q.get("file", "report.html")
    if rdir is None or (name != "report.html" and name not in bt.report_charts(found)):
        return error_response(CommandError(f"no report file {name!r} for {found.id}"))
    return FileResponse(rdir / name, headers={"Content-Security-Policy": REPORT_CSP})


async def login(request: Request) -> Response:
    """Ask the browser for HTTP Basic credentials; once they verify, it sends them with every request."""
    if await console_of(request).principal(request) is None:
        return HTMLResponse(
            "<p>Sign in with a user from the store (quotaflow users add).</p>",
            status_code=401,
            headers={"WWW-Authenticate": f'Basic realm="{REALM}"'},
        )
    target = request.query_params.get("next", "/quotas")
    return RedirectResponse(target if target.startswith("/") and not target.startswith("//") else "/quotas", 303)


ROUTES: Final = [
    Route("/", home),
    Route("/quotas", quotas),
    Route("/resolve", resolve),
    Route("/live", live),
    Route("/backtests", backtests),
    Route("/backtests/{id:path}", backtest),
    Route("/report", report_file),
    Route("/login", login),
]
