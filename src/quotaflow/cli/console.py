"""``quotaflow console``: the web console (docs/console.md) served by uvicorn until SIGINT / SIGTERM.

Prints ``quotaflow console ready: http://HOST:PORT`` (``https://`` with ``--certfile``) once it accepts
connections (port 0 picks a free port), so scripts and tests can wait for that line.

Sign-in sends a password with every write (HTTP Basic), so the console refuses to listen beyond loopback in clear
text: a non-loopback ``--listen`` needs ``--certfile`` / ``--keyfile`` (TLS), or ``--insecure-http`` to say that the
network in between is trusted.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
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
from quotaflow.gateway.config import GatewayConfig, read_properties
from quotaflow.store import open_store
from quotaflow.store.factory import stderr_notice

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


def is_loopback(host: str) -> bool:
    """True when every address ``host`` names is a loopback one (``127.0.0.0/8``, ``::1``, ``localhost``).
    ``0.0.0.0`` / ``::`` (every interface) are not."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(str(info[4][0]).split("%")[0]).is_loopback for info in infos)


def tls_context(certfile: Path, keyfile: Path | None) -> ssl.SSLContext:
    """The server context (TLS 1.2 at least), loaded now so a bad certificate or key is a clear startup error."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(certfile, keyfile)
    except (OSError, ssl.SSLError) as e:
        raise click.ClickException(f"cannot load the TLS certificate {certfile} / key {keyfile}: {e}") from e
    return context


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
@click.option("--certfile", type=click.Path(path_type=Path, dir_okay=False, exists=True), default=None,
              help="Serve HTTPS with this PEM certificate (chain); its key in --keyfile or in the same file.")
@click.option("--keyfile", type=click.Path(path_type=Path, dir_okay=False, exists=True), default=None,
              help="The PEM private key of --certfile.")
@click.option("--insecure-http", is_flag=True,
              help="Allow plain HTTP on a non-loopback --listen address: passwords then cross the network in clear.")
@click.option("--config", "config_path", type=click.Path(path_type=Path, dir_okay=False, exists=True), default=None,
              help="server.properties-style settings; the console reads connection.failed.authentication.delay.ms "
                   "and quotaflow.sasl.failed.authentication.rate.per.ip (its sign-in, like the gateway's SASL).")
def console(store: str | None, gateways: tuple[str, ...], listen: str, backtests: Path | None, read_only: bool,
            admins: tuple[str, ...], scrape_interval: float, history: int, certfile: Path | None,
            keyfile: Path | None, insecure_http: bool, config_path: Path | None) -> None:
    """The web console: see and change quotas, resolve, watch live throttling, browse backtests."""
    host, port = parse_listen(listen)
    urls = [_gateway_url(g) for g in gateways]
    if keyfile is not None and certfile is None:
        raise click.BadParameter("--keyfile needs --certfile", param_hint="--keyfile")
    tls = tls_context(certfile, keyfile) if certfile is not None else None
    if tls is None and not insecure_http and not is_loopback(host):
        raise click.ClickException(
            f"refusing to serve the console on {listen} in plain HTTP: sign-in passwords would cross the network in "
            f"clear. Give --certfile/--keyfile (HTTPS), listen on a loopback address, or pass --insecure-http"
        )
    try:
        gateway_settings = GatewayConfig.from_properties(read_properties(config_path)) if config_path else None
    except QuotaflowError as e:
        raise click.ClickException(str(e)) from e
    try:  # the console cannot add users, so a store it created would be empty and useless: only open one
        quota_store = open_store(store, create=False, notice=stderr_notice)
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
        if gateway_settings is not None:
            config.failed_authentication_delay_ms = gateway_settings.failed_authentication_delay_ms
            config.failed_rate_per_ip = gateway_settings.sasl_failed_rate_per_ip
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
        # TLS with our context (TLS 1.2 at least, loaded and checked above), not uvicorn's default one
        uv_config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                                   ssl_context_factory=None if tls is None else lambda _config, _default: tls)
        if tls is None and not is_loopback(host):
            click.echo(f"quotaflow console: WARNING: plain HTTP on {listen} (--insecure-http): sign-in passwords "
                       f"cross the network in clear", err=True)
        server = _Server(uv_config)
        server.url = f"{'https' if tls is not None else 'http'}://{shown}:{bound[1]}"
        server.run(sockets=[sock])
    finally:
        quota_store.close()
