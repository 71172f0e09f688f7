"""The console's Starlette app: the pages, the JSON API under ``/api`` and the vendored static files.

Blocking work (SQLite reads and writes, PBKDF2, Parquet) runs in Starlette's thread pool, so a slow request never
stalls the event loop that also scrapes the gateways.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles

from quotaflow.console import acls, api, pages, shadow
from quotaflow.console.headers import SecurityHeaders
from quotaflow.console.state import Console, ConsoleConfig
from quotaflow.console.views import make_templates
from quotaflow.store.base import QuotaStore

STATIC_DIR: Final = Path(__file__).parent / "static"


def create_app(store: QuotaStore, config: ConsoleConfig | None = None) -> Starlette:
    """The console over ``store``. The store stays open for the app's life; the caller closes it afterwards.
    The gateways are scraped while the app runs (its lifespan)."""
    console = Console(store, config or ConsoleConfig())

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        console.live.start()
        try:
            yield
        finally:
            await console.live.stop()

    routes = [*pages.ROUTES, *acls.PAGE_ROUTES, *acls.API_ROUTES, *shadow.API_ROUTES, *api.ROUTES,
              Mount("/static", app=StaticFiles(directory=STATIC_DIR), name="static")]
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={HTTPException: api.http_error},
                    middleware=[Middleware(SecurityHeaders)])
    app.state.console = console
    app.state.templates = make_templates()
    return app
