"""The console's Starlette app: pages (Jinja2), the JSON API under ``/api`` and the vendored static files.

Blocking work (SQLite reads and writes, PBKDF2, Parquet) runs in Starlette's thread pool, so a slow request never
stalls the event loop that also scrapes the gateways. Errors are Kafka's: a bad filter or alteration is HTTP 400
with Kafka's code, name and message; no or wrong credentials 401 (with an HTTP Basic challenge); not an admin, or a
read-only console, 403.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlencode, urlsplit

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

import quotaflow.console.backtests as bt
from quotaflow.admin import Admin, Alteration
from quotaflow.admin.codec import alter_to_json, describe_to_json, resolution_to_json
from quotaflow.console.access import REALM, Access, Principal
from quotaflow.console.live import LiveMetrics
from quotaflow.console.quotas import ENTITY_TYPES, MATCHES, QUOTA_KEYS, field_of, filter_form, parse_alteration
from quotaflow.core.errors import (
    ClusterAuthorizationFailedError,
    CommandError,
    InvalidRequestError,
    KafkaError,
    SaslAuthenticationFailedError,
)
from quotaflow.core.javafmt import java_double_str
from quotaflow.core.precedence import LEVEL_NAMES
from quotaflow.store.base import QuotaStore

STATIC_DIR: Final = Path(__file__).parent / "static"
TEMPLATES_DIR: Final = Path(__file__).parent / "templates"
MAX_BODY_BYTES: Final = 64 * 1024
PAGE_HEADER: Final = "x-quotaflow-page"


@dataclass(slots=True)
class ConsoleConfig:
    """What ``quotaflow console`` was started with."""

    gateways: Sequence[str] = ()
    backtests: Path | None = None
    read_only: bool = False
    admins: frozenset[str] | None = None
    scrape_interval_s: float = 2.0
    history: int = 300
    extra: dict[str, Any] = field(default_factory=dict)


def _error_doc(error: KafkaError) -> dict[str, Any]:
    return {"code": error.errno, "name": error.name, "message": str(error)}


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
    if isinstance(error, KafkaError):
        doc = _error_doc(error)
    else:
        doc = {"code": None, "name": "NOT_FOUND", "message": str(error)}
    challenge = challenge and isinstance(error, SaslAuthenticationFailedError)
    headers = {"WWW-Authenticate": f'Basic realm="{REALM}"'} if challenge else None
    return JSONResponse({"error": doc, **(extra or {})}, status_code=_status(error), headers=headers)


def entity_text(entity: dict[str, str | None] | None) -> str:
    """``user=alice, client-id=<default>`` (empty entity: ``-``)."""
    if not entity:
        return "-"
    order = {t: i for i, t in enumerate(ENTITY_TYPES)}
    parts = sorted(entity.items(), key=lambda kv: order.get(kv[0], 9))
    return ", ".join(f"{t}={'<default>' if n is None else n}" for t, n in parts)


def quotas_link(entity: dict[str, str | None] | None) -> str:
    """The Quotas page filtered (strict) to exactly this entity."""
    query: dict[str, str] = {"strict": "1"}
    for t, n in (entity or {}).items():
        if n is None:
            query[f"{t}_match"] = "default"
        else:
            query[f"{t}_match"], query[t] = "exact", n
    return "/quotas?" + urlencode(query)


def resolve_link(entity: dict[str, str | None] | None) -> str | None:
    """Resolve for the clients this entity applies to: its names, the default parts left for the user to fill."""
    if not entity:
        return None
    named = {t: n for t, n in entity.items() if n is not None}
    return "/resolve" + ("?" + urlencode(named) if named else "")


def shares_text(quota_id: dict[str, str] | None) -> str:
    """Who is metered together under this quota-id (the metric tags)."""
    if quota_id is None:
        return "not metered: no quota of this kind is configured anywhere"
    if "ip" in quota_id:
        return f"connections from ip {quota_id['ip']}"
    user, client = quota_id.get("user", ""), quota_id.get("client-id", "")
    if user and client:
        return f"only user {user} with client-id {client}"
    if user:
        return f"every client-id of user {user}"
    if client:
        return f"every user with client-id {client}"
    return "everyone (no tags)"


def level_name(level: int, entity: dict[str, str | None]) -> str:
    """The precedence level's name: KIP-55's eight for a client, KIP-612's two for an ip."""
    if "ip" in entity:
        return "ip" if level == 1 else "<default> ip"
    return LEVEL_NAMES.get(level, "")


class Console:
    """The app's state: one store, its admin, the write policy, the live scraper, where backtests are."""

    def __init__(self, store: QuotaStore, config: ConsoleConfig) -> None:
        self.store = store
        self.config = config
        self.admin = Admin(store)
        self.access = Access(store, read_only=config.read_only, admins=config.admins)
        self.live = LiveMetrics(
            config.gateways, self.admin.index, interval_s=config.scrape_interval_s, history=config.history
        )

    async def principal(self, request: Request) -> Principal | None:
        header = request.headers.get("authorization")
        if not header:
            return None
        try:
            return await run_in_threadpool(self.access.principal, header)
        except SaslAuthenticationFailedError:
            return None


def _templates() -> Jinja2Templates:
    env = Environment(loader=FileSystemLoader(TEMPLATES_DIR), autoescape=select_autoescape())
    env.filters["jd"] = lambda v: "unlimited" if v is None else java_double_str(float(v))
    env.filters["entity"] = entity_text
    env.filters["num"] = _num
    env.globals.update(
        quotas_link=quotas_link, resolve_link=resolve_link, shares_text=shares_text, level_name=level_name
    )
    return Jinja2Templates(env=env)


def _num(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"
    return str(value)


def _utc(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000))


def _same_origin(request: Request) -> bool:
    """Writes from another site's page are refused: a browser always sends Origin on a cross-site POST."""
    origin = request.headers.get("origin")
    return origin is None or urlsplit(origin).netloc == request.headers.get("host")


def create_app(store: QuotaStore, config: ConsoleConfig | None = None) -> Starlette:
    """The console over ``store``. The store stays open for the app's life; the caller closes it afterwards."""
    console = Console(store, config or ConsoleConfig())
    templates = _templates()

    async def page(request: Request, name: str, context: dict[str, Any], status: int = 200) -> HTMLResponse:
        principal = await console.principal(request)
        base = {
            "principal": principal,
            "read_only": console.config.read_only,
            "nav": name.removesuffix(".html"),
            "gateways": list(console.live.gateways),
            "backtests_dir": console.config.backtests,
        }
        response: HTMLResponse = templates.TemplateResponse(request, name, {**base, **context}, status_code=status)
        return response

    # -- API ----------------------------------------------------------------------------------------------------
    async def api_quotas_get(request: Request) -> Response:
        try:
            form = filter_form(request.query_params)
            found = await run_in_threadpool(console.admin.describe, form.to_filter())
        except KafkaError as e:
            return error_response(e)
        return JSONResponse(describe_to_json(found))

    async def api_quotas_post(request: Request) -> Response:
        if not _same_origin(request):
            return error_response(ClusterAuthorizationFailedError("Cross-origin writes are refused"))
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            return error_response(InvalidRequestError("POST /api/quotas takes application/json"))
        try:
            await run_in_threadpool(console.access.require_admin, request.headers.get("authorization"))
        except KafkaError as e:
            # the console's own page sends PAGE_HEADER: it offers its sign-in link instead of the browser's dialog
            return error_response(e, challenge=PAGE_HEADER not in request.headers)
        raw = await request.body()
        if len(raw) > MAX_BODY_BYTES:
            return error_response(InvalidRequestError(f"The request body is larger than {MAX_BODY_BYTES} bytes"))
        try:
            body = json.loads(raw)
        except ValueError:
            return error_response(InvalidRequestError("The request body is not JSON"))
        try:
            alteration, validate_only = parse_alteration(body)
        except InvalidRequestError as e:
            return error_response(e, {"field": {"entity": True}})
        return await _alter(alteration, validate_only)

    async def _alter(alteration: Alteration, validate_only: bool) -> Response:
        results = await run_in_threadpool(console.admin.alter, [alteration], validate_only)
        doc: dict[str, Any] = {"validate_only": validate_only, "results": alter_to_json(results)}
        failed = next((r for r in results if not r.ok), None)
        if failed is not None:
            error = failed.error.exception()
            return error_response(error, {**doc, "field": field_of(error.message, alteration)})
        if not validate_only:
            doc["seq"] = await run_in_threadpool(console.store.last_seq)
        return JSONResponse(doc)

    async def api_resolve(request: Request) -> Response:
        q = request.query_params
        try:
            if "ip" in q:
                if "user" in q or "client-id" in q:
                    raise InvalidRequestError("Resolve takes ?ip= alone, or ?user=&client-id=")
                res = await run_in_threadpool(console.admin.resolve_ip, q["ip"])
            else:
                if "user" not in q or "client-id" not in q:
                    raise InvalidRequestError("Resolve needs ?user=&client-id= (a client has both) or ?ip=")
                res = await run_in_threadpool(console.admin.resolve, q["user"], q["client-id"])
        except KafkaError as e:
            return error_response(e)
        return JSONResponse(resolution_to_json(res))

    async def api_whoami(request: Request) -> Response:
        try:
            principal = await run_in_threadpool(console.access.principal, request.headers.get("authorization"))
        except KafkaError as e:
            return error_response(e)
        return JSONResponse(
            {
                "principal": None if principal is None else principal.name,
                "admin": principal is not None and principal.admin and not console.config.read_only,
                "read_only": console.config.read_only,
            }
        )

    async def api_live(request: Request) -> Response:
        return JSONResponse(console.live.snapshot())

    async def api_live_history(request: Request) -> Response:
        history = console.live.history_of(request.query_params.get("id", ""))
        if history is None:
            return error_response(CommandError("no such live series"))
        return JSONResponse(history)

    def _root() -> Path:
        if console.config.backtests is None:
            raise CommandError("the console was started without --backtests DIR")
        return console.config.backtests

    async def api_backtests(request: Request) -> Response:
        root = console.config.backtests
        found = [] if root is None else await run_in_threadpool(bt.discover, root)
        return JSONResponse(await run_in_threadpool(lambda: [bt.listing(b) for b in found]))

    async def api_backtest(request: Request) -> Response:
        try:
            found = await run_in_threadpool(bt.find, _root(), request.path_params["id"])
            doc = await run_in_threadpool(bt.describe, found)
        except CommandError as e:
            return error_response(e)
        return JSONResponse(doc)

    async def api_backtest_windows(request: Request) -> Response:
        q = request.query_params
        try:
            found = await run_in_threadpool(bt.find, _root(), q.get("id", ""))
            doc = await run_in_threadpool(
                bt.entity_windows, found, q.get("broker", ""), q.get("quota_type", ""), q.get("user", ""),
                q.get("client_id", ""),
            )
        except CommandError as e:
            return error_response(e)
        return JSONResponse(doc)

    # -- pages --------------------------------------------------------------------------------------------------
    async def home(request: Request) -> Response:
        return RedirectResponse("/quotas", status_code=303)

    async def quotas_page(request: Request) -> Response:
        error: str | None = None
        found: list[dict[str, Any]] = []
        try:
            form = filter_form(request.query_params)
        except KafkaError as e:
            form, error = filter_form({}), f"{e.name}: {e}"
        if error is None:
            try:
                found = describe_to_json(await run_in_threadpool(console.admin.describe, form.to_filter()))
            except KafkaError as e:
                error = f"{e.name}: {e}"
        return await page(
            request,
            "quotas.html",
            {
                "form": form,
                "rows": found,
                "error": error,
                "entity_types": ENTITY_TYPES,
                "matches": MATCHES,
                "quota_keys": QUOTA_KEYS,
                "edit": {t: request.query_params.get(f"edit_{t}") for t in ENTITY_TYPES},
            },
            400 if error else 200,
        )

    async def resolve_page(request: Request) -> Response:
        q = request.query_params
        doc: dict[str, Any] | None = None
        error: str | None = None
        try:  # a partial query (a link from a user-only entity) just fills the form
            if q.get("ip"):
                doc = resolution_to_json(await run_in_threadpool(console.admin.resolve_ip, q["ip"]))
            elif "user" in q and "client-id" in q:
                doc = resolution_to_json(await run_in_threadpool(console.admin.resolve, q["user"], q["client-id"]))
        except KafkaError as e:
            error = f"{e.name}: {e}"
        return await page(
            request,
            "resolve.html",
            {"doc": doc, "error": error, "q": {k: q.get(k, "") for k in ENTITY_TYPES}},
            400 if error else 200,
        )

    async def live_page(request: Request) -> Response:
        return await page(request, "live.html", {"interval_s": console.live.interval_s})

    async def backtests_page(request: Request) -> Response:
        root = console.config.backtests
        found = [] if root is None else await run_in_threadpool(bt.discover, root)
        rows = await run_in_threadpool(lambda: [bt.listing(b) for b in found])
        return await page(request, "backtests.html", {"backtests": rows, "root": root})

    async def backtest_page(request: Request) -> Response:
        try:
            found = await run_in_threadpool(bt.find, _root(), request.path_params["id"])
            doc = await run_in_threadpool(bt.describe, found)
        except CommandError as e:
            return await page(request, "backtests.html", {"backtests": [], "root": None, "error": str(e)}, 404)
        span = doc["span_ms"]
        return await page(
            request,
            "backtest.html",
            {"bt": doc, "span": None if span is None else (_utc(span["first"]), _utc(span["last"]))},
        )

    async def report_file(request: Request) -> Response:
        q = request.query_params
        try:
            found = await run_in_threadpool(bt.find, _root(), q.get("id", ""))
        except CommandError as e:
            return error_response(e)
        rdir = bt.report_dir(found)
        name = q.get("file", "report.html")
        if rdir is None or (name != "report.html" and name not in bt.report_charts(found)):
            return error_response(CommandError(f"no report file {name!r} for {found.id}"))
        return FileResponse(rdir / name)

    async def login(request: Request) -> Response:
        """Ask the browser for HTTP Basic credentials; once they verify, it sends them with every request."""
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

    routes = [
        Route("/", home),
        Route("/quotas", quotas_page),
        Route("/resolve", resolve_page),
        Route("/live", live_page),
        Route("/backtests", backtests_page),
        Route("/backtests/{id:path}", backtest_page),
        Route("/report", report_file),
        Route("/login", login),
        Route("/api/quotas", api_quotas_get, methods=["GET"]),
        Route("/api/quotas", api_quotas_post, methods=["POST"]),
        Route("/api/resolve", api_resolve),
        Route("/api/whoami", api_whoami),
        Route("/api/live", api_live),
        Route("/api/live/history", api_live_history),
        Route("/api/backtests", api_backtests),
        Route("/api/backtest-windows", api_backtest_windows),
        Route("/api/backtests/{id:path}", api_backtest),
        Mount("/static", app=StaticFiles(directory=STATIC_DIR), name="static"),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        console.live.start()
        try:
            yield
        finally:
            await console.live.stop()

    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.console = console
    return app


Factory = Callable[[], Starlette]
