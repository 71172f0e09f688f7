"""The web console: see and change quotas, resolve who gets which quota, watch live throttling, browse backtests.

A Starlette app (``create_app``) served by uvicorn, Jinja2 pages, and a JSON API under ``/api`` that the pages use
themselves. It depends inward only (core, engine, store, admin); the gateways and backtests are read through their
HTTP ``/metrics`` and their output files. See docs/console.md.
"""

from quotaflow.console.app import create_app
from quotaflow.console.state import ConsoleConfig

__all__ = ["ConsoleConfig", "create_app"]
