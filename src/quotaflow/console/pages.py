"""The HTML pages: Quotas, Resolve, Live, Backtests (and one backtest), the report's files, sign-in."""

from __future__ import annotations

from typing import Any, Final

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

import quotaflow.console.backtests as bt
from quotaflow.admin.codec import describe_to_json, resolution_to_json
from quotaflow.console.access import REALM
from quotaflow.console.api import error_response
from quotaflow.console.quotas import ENTITY_TYPES, MATCHES, QUOTA_KEYS, filter_form
from quotaflow.console.state import console_of
from quotaflow.console.views import render, utc
from quotaflow.core.errors import CommandError, KafkaError

PAGE_ROWS: Final = 1000  # the Quotas page lists this many entities at most (the API returns every match)


async def home(request: Request) -> Response:
    return RedirectResponse("/quotas", status_code=303)


async def quotas(request: Request) -> Response:
    console = console_of(request)
    error: str | None = None
    found: list[dict[str, Any]] = []
    total = 0
    try:
        form = filter_form(request.query_params)
    except KafkaError as e:
        form, error = filter_form({}), f"{e.name}: {e}"
    if error is None:
        try:
            described = await run_in_threadpool(console.admin.describe, form.to_filter())
        except KafkaError as e:
            error = f"{e.name}: {e}"
        else:
            total = len(described)
            found = describe_to_json(described[:PAGE_ROWS])
    context = {"form": form, "rows": found, "total": total, "error": error, "entity_types": ENTITY_TYPES,
               "matches": MATCHES, "quota_keys": QUOTA_KEYS}
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
    return await render(request, "live.html", {"interval_s": console_of(request).live.interval_s})


async def backtests(request: Request) -> Response:
    root = console_of(request).config.backtests
    found = [] if root is None else await run_in_threadpool(bt.discover, root)
    rows = await run_in_threadpool(lambda: [bt.listing(b) for b in found])
    return await render(request, "backtests.html", {"backtests": rows, "root": root})


async def backtest(request: Request) -> Response:
    console = console_of(request)
    try:
        found = await run_in_threadpool(bt.find, console.backtests_root(), request.path_params["id"])
        doc = await run_in_threadpool(bt.describe, found)
    except CommandError as e:
        return await render(request, "backtests.html", {"backtests": [], "root": None, "error": str(e)}, 404)
    span = doc["span_ms"]
    return await render(
        request, "backtest.html", {"bt": doc, "span": None if span is None else (utc(span["first"]), utc(span["last"]))}
    )


async def report_file(request: Request) -> Response:
    """``report.html`` or one of its PNG charts, only from the report next to a discovered backtest."""
    console, q = console_of(request), request.query_params
    try:
        found = await run_in_threadpool(bt.find, console.backtests_root(), q.get("id", ""))
    except CommandError as e:
        return error_response(e)
    rdir = bt.report_dir(found)
    name = q.get("file", "report.html")
    if rdir is None or (name != "report.html" and name not in bt.report_charts(found)):
        return error_response(CommandError(f"no report file {name!r} for {found.id}"))
    return FileResponse(rdir / name)


async def login(request: Request) -> Response:
    """Ask the browser for HTTP Basic credentials; once they verify, it sends them with every request."""
    console = console_of(request)
    try:
        principal = await run_in_threadpool(console.access.principal, request.headers.get("authorization"))
    except KafkaError:
        principal = None
    if principal is None:
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
