"""``quotaflow gateway``: run the quota-enforcing Kafka gateway in front of an upstream cluster."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import signal
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import click

from quotaflow.cli.common import STORE_HELP
from quotaflow.core.addresses import parse_host_port
from quotaflow.core.errors import QuotaflowError
from quotaflow.gateway.data.brokers import parse_upstreams
from quotaflow.gateway.server import Gateway, new_event_loop
from quotaflow.store import store_value

if TYPE_CHECKING:
    from quotaflow.cli.gateway_workers import SlotBoard


def _listeners(values: tuple[str, ...]) -> dict[str, tuple[str, int]]:
    out: dict[str, tuple[str, int]] = {}
    for value in values:
        name, sep, address = value.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"expected NAME=HOST:PORT, got {value!r}", param_hint="--listen")
        try:
            out[name] = parse_host_port(address)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--listen") from e
    return out


def _port_bases(values: tuple[str, ...]) -> dict[str, int]:
    out: dict[str, int] = {}
    for value in values:
        name, sep, port = value.partition("=")
        if not sep or not name or not port.isdigit() or not 0 < int(port) <= 65535:
            raise click.BadParameter(f"expected NAME=PORT, got {value!r}", param_hint="--broker-port-base")
        out[name] = int(port)
    return out


@click.command("gateway")
@click.option("--upstream", required=True, metavar="HOST:PORT[,HOST:PORT...]",
              help="The Kafka(-compatible) cluster to front: its bootstrap servers.")
@click.option("--listen", "listen", multiple=True, required=True, metavar="NAME=HOST:PORT",
              help="A named listener (repeatable); port 0 picks a free port, printed on startup.")
@click.option("--broker-port-base", "port_bases", multiple=True, metavar="NAME=PORT",
              help="Serve upstream node N of listener NAME on port PORT+N (repeatable). Without it each node gets "
                   "a free port, printed on the ready line and served at /brokers on the metrics port.")
@click.option("--store", "store", metavar="PATH|URL", default=None, help=STORE_HELP)
@click.option("--config", "config_path", type=click.Path(path_type=Path, dir_okay=False, exists=True), default=None,
              help="server.properties-style settings (socket.request.max.bytes, connections.max.idle.ms, "
                   "quota.window.*, connection-rate quotas, which reload when the file changes; "
                   "authorizer.class.name, super.users, allow.everyone.if.no.acl.found: docs/security.md).")
@click.option("--metrics-port", type=int, default=None,
              help="Serve /metrics (Prometheus) and /resolve (JSON) on 127.0.0.1:PORT (0 = any free port).")
@click.option("--event-log", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Append usage events (Parquet, docs/events.md) under this directory.")
@click.option("--admin-principal", "admins", multiple=True,
              help="A principal allowed to describe/alter quotas over the wire (repeatable; 'alice' or "
                   "'User:alice'). Without any, every principal may (a Kafka broker with no authorizer). With "
                   "authorizer.class.name these are super users too.")
@click.option("--inter-broker-listener", default=None, help="The listener exempt from the broker-wide connection "
                                                            "rate (inter.broker.listener.name).")
@click.option("--broker", "broker_name", default="gateway", show_default=True,
              help="The broker name written into usage events.")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="Gateway processes accepting on the same listener ports (SO_REUSEPORT), one core each; worker i "
                   "serves metrics on --metrics-port + i and logs events under EVENT_LOG/worker-<i>. Give them a "
                   "kafka:// store and quotaflow.quota.scope=cluster to share quotas (docs/cluster-quotas.md).")
@click.option("-v", "--verbose", count=True, help="More logging (-v info, -vv debug).")
def gateway(upstream: str, listen: tuple[str, ...], store: str | None, config_path: Path | None,
            metrics_port: int | None, event_log: Path | None, admins: tuple[str, ...],
            inter_broker_listener: str | None, broker_name: str, port_bases: tuple[str, ...], workers: int,
            verbose: int) -> None:
    """Enforce Kafka client quotas (KIP-55/124/612) on live traffic to UPSTREAM and serve the quota admin APIs
    (DescribeClientQuotas / AlterClientQuotas) from the quota store. Stops on SIGINT / SIGTERM."""
    logging.basicConfig(level=[logging.WARNING, logging.INFO, logging.DEBUG][min(verbose, 2)],
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    listeners = _listeners(listen)
    bases = _port_bases(port_bases)

    def serve(bind: Mapping[str, tuple[str, int]], worker: int | None, board: SlotBoard | None = None) -> None:
        """One gateway; worker ``i`` of ``--workers`` shares the ports and takes metrics port + i, its own log."""
        worker_metrics = metrics_port if worker is None or not metrics_port else metrics_port + worker
        worker_events = event_log if worker is None or event_log is None else event_log / f"worker-{worker}"
        try:
            gw = Gateway(parse_upstreams(upstream), dict(bind), store_value(store), config_path=config_path,
                         admin_principals=frozenset(admins) if admins else None, event_log=worker_events,
                         metrics_port=worker_metrics, inter_broker_listener=inter_broker_listener,
                         broker=broker_name, broker_port_base=bases, reuse_port=worker is not None,
                         freeze_loaded=True)
        except (QuotaflowError, ValueError) as e:
            raise click.ClickException(str(e)) from e
        if getattr(gw.store, "signed", True) is False:
            logging.getLogger("quotaflow.gateway").warning(
                "quota store %s: records are not signed (quotaflow.store.signing.key.file is not set): anyone who "
                "can write its topic can forge quotas, credentials and ACLs (docs/store.md)", gw.store)
        loop = new_event_loop()
        try:
            if board is not None:
                gw.add_metric_source(board)
            loop.run_until_complete(_run(gw, None if board is None or worker is None else
                                         functools.partial(board.mark_ready, worker)))
        except OSError as e:
            raise click.ClickException(f"cannot start the gateway: {e}") from e
        finally:
            loop.close()

    if workers == 1:
        serve(listeners, None)
        return

    def worker_main(index: int, bind: Mapping[str, tuple[str, int]], board: SlotBoard) -> int:
        try:
            serve(bind, index, board)
        except click.ClickException as e:
            e.show()
            return e.exit_code
        return 0

    from quotaflow.cli.gateway_workers import supervise

    try:
        status = supervise(workers, listeners, worker_main)
    except OSError as e:
        raise click.ClickException(f"cannot reserve the listener ports: {e}") from e
    sys.exit(status)


async def _run(gw: Gateway, on_ready: Callable[[], None] | None = None) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    await gw.start()
    # everything allocated so far (message classes, engine, numba) lives for the whole process: keep it out of the
    # collector's scans, so collections stay short and do not stall in-flight requests
    gc.collect()
    gc.freeze()
    try:
        parts = [f"{name}={host}:{port}" for name, (host, port) in gw.addresses.items()]
        if gw.metrics_address is not None:
            parts.append(f"metrics=http://{gw.metrics_address[0]}:{gw.metrics_address[1]}")
        parts.append("upstream=" + ",".join(f"{host}:{port}" for host, port in gw.upstreams))
        # each upstream node's gateway port per listener: NAME.NODE=HOST:PORT (more appear as brokers join; see
        # /brokers on the metrics port)
        for name, nodes in gw.node_addresses.items():
            parts += [f"{name}.{node}={host}:{port}" for node, (host, port) in sorted(nodes.items())]
        click.echo(f"quotaflow gateway ready: {' '.join(parts)}")
        sys.stdout.flush()
        if on_ready is not None:
            on_ready()
        await stop.wait()
    finally:
        await gw.stop()
