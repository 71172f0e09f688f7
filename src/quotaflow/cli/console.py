"""``quotaflow console``: the web console (docs/console.md) served by uvicorn until SIGINT / SIGTERM.

Prints ``quotaflow console ready: http://HOST:PORT`` once it accepts connections (port 0 picks a free port), so
scripts and tests can wait for that line.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import Final

import click
import uvicorn

from quotaflow.cli.common import STORE_HELP
from quotaflow.console import ConsoleConfig, create_app
from quotaflow.console.live import DEFAULT_HISTORY, DEFAULT_INTERVAL_S
from quotaflow.core.addresses import parse_host_port
from quotaflow.core.errors import QuotaflowError
from quotaflow.store import open_store

DEFAULT_LISTEN: Final = "127.0.0.1:8080"


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6)."""
    try:
        return parse_host_port(text)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--listen") from e


def _gateway_url(text: str) -> str:
    if not text.startswith(("http://", "https://")):
        raise click.BadParameter(
            f"expected the gateway's HTTP endpoint http://HOST:PORT (its --metrics-port), got {text!r}",
            param_hint="--gateway",
        )
    return text.rstrip("/")


class _Server(uvicorn.Server):
    """Announces the address once uvicorn has started (lifespan done, socket listening)."""

    url = ""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            click.echo(f"quotaflow console ready: {self.url}")
            sys.stdout.flush()


@click.command("console")
@click.option("--store", "store", metavar="PATH|URL", default=None, help=STORE_HELP)
@click.option("--gateway", "gateways", multiple=True, metavar="http://HOST:PORT",
              help="A gateway's HTTP endpoint (its --metrics-port) for the Live page (repeatable).")
@click.option("--listen", default=DEFAULT_LISTEN, show_default=True, metavar="HOST:PORT",
              help="Where to serve the console (port 0 picks a free port).")
@click.option("--backtests", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="A directory holding outputs of `quotaflow backtest` / `replay`, for the Backtests page.")
@click.option("--read-only", is_flag=True, help="Never change quotas (no sign-in needed to look).")
@click.option("--admin-principal", "admins", multiple=True,
              help="A store user allowed to change quotas (repeatable; 'alice' or 'User:alice'). Without any, "
                   "every user in the store may, after signing in.")
@click.option("--scrape-interval", type=click.FloatRange(min=0.2), default=DEFAULT_INTERVAL_S, show_default=True,
              help="Seconds between scrapes of each gateway's /metrics.")
@click.option("--history", type=click.IntRange(min=10, max=100_000), default=DEFAULT_HISTORY, show_default=True,
              help="Scrapes kept per series (memory is bounded by this times the number of series).")
def console(store: str | None, gateways: tuple[str, ...], listen: str, backtests: Path | None, read_only: bool,
            admins: tuple[str, ...], scrape_interval: float, history: int) -> None:
    """The web console: see and change quotas, resolve, watch live throttling, browse backtests."""
    host, port = parse_listen(listen)
    urls = [_gateway_url(g) for g in gateways]
    try:  # the console cannot add users, so a store it created would be empty and useless: only open one
        quota_store = open_store(store, create=False)
    except QuotaflowError as e:
        raise click.ClickException(str(e)) from e
    try:
        if not read_only and not quota_store.list_credentials():
            raise click.ClickException(
                f"no user in the store {quota_store.path} can sign in to change quotas: add one with "
                f"`quotaflow users add NAME --store {quota_store.path}`, or start the console with --read-only"
            )
        config = ConsoleConfig(
            gateways=urls, backtests=backtests, read_only=read_only, admins=frozenset(admins) if admins else None,
            scrape_interval_s=scrape_interval, history=history,
        )
        app = create_app(quota_store, config)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as e:
            sock.close()
            raise click.ClickException(f"cannot listen on {listen}: {e}") from e
        bound = sock.getsockname()
        shown = f"[{bound[0]}]" if family == socket.AF_INET6 else bound[0]
        server = _Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on"))
        server.url = f"http://{shown}:{bound[1]}"
        server.run(sockets=[sock])
    finally:
        quota_store.close()
