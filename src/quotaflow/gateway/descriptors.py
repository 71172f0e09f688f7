"""File descriptors, the gateway's hard limit on connections: the soft ``RLIMIT_NOFILE`` raised at start, and the
``max.connections`` that fits in it.

Each client connection holds two descriptors (its socket and, once it sends a request to forward, its upstream
socket). A gateway past its descriptor limit fails ``accept`` with EMFILE: the client sits in the backlog, then its
upstream connect fails too, and a new client cannot even bootstrap. Kafka's answer to too many connections is
``max.connections``: the acceptor stops accepting while no slot is free (new clients wait in the listen backlog,
``AcceptorBlockedPercent`` shows it) and counts resume as connections close. Kafka's default is unbounded
(2147483647); the gateway's is what its descriptors allow, ``(nofile - DESCRIPTOR_RESERVE) / 2``, so the refusal is
Kafka's clean one rather than EMFILE. A ``max.connections`` set above that is lowered to it, with a warning.

An idle client's upstream leg is closed (``quotaflow.upstream.connections.max.idle.ms``), so an idle client holds one
descriptor, as on a broker. The default stays two a connection (every client may be active at once); an operator
whose clients are mostly idle may set ``max.connections`` up to one a connection, ``nofile - DESCRIPTOR_RESERVE``
(with a warning). Near the limit the housekeeping closes the longest-idle legs with nothing in flight early
(:func:`legs_over`); a leg that still finds no descriptor is retried as an unreachable upstream is while others
close, and its client is closed if none frees within ``quotaflow.upstream.connect.timeout.ms``.
"""

from __future__ import annotations

import dataclasses
import logging
import resource
from pathlib import Path
from typing import Final

from quotaflow.core.keys import INT_MAX
from quotaflow.engine.connection import ConnectionQuotaConfig

log = logging.getLogger(__name__)

# descriptors kept for everything but client connections: listening sockets (one per listener and per broker port),
# upstream metadata and partition-count connections, the store, the event log's files, the metrics server, the
# interpreter's own (shared libraries, /dev/urandom, the event loop's selector and self-pipe)
DESCRIPTOR_RESERVE: Final = 64
DESCRIPTORS_PER_CONNECTION: Final = 2  # the client's socket and its upstream socket
DESCRIPTORS_PER_IDLE_CONNECTION: Final = 1  # the client's socket: its idle upstream leg closed
_NR_OPEN: Final = Path("/proc/sys/fs/nr_open")  # the kernel's ceiling when the hard limit is unlimited


def raise_nofile_limit() -> int:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit (as a JVM does at start with ``-XX:+MaxFDLimit``, on by
    default); the soft limit in force after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:
        try:
            target = int(_NR_OPEN.read_text())
        except (OSError, ValueError):
            target = 1 << 20
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (OSError, ValueError) as e:  # e.g. a container that forbids it: keep the soft limit
            log.warning("could not raise the open-file limit from %d to %d: %s", soft, target, e)
    return INT_MAX if soft == resource.RLIM_INFINITY else int(soft)


def connection_budget(nofile: int, per_connection: int = DESCRIPTORS_PER_CONNECTION) -> int:
    """The client connections ``nofile`` descriptors can hold (at least 1), ``per_connection`` descriptors each."""
    return max(1, (nofile - DESCRIPTOR_RESERVE) // per_connection)


def legs_over(nofile: int, connections: int, legs: int) -> int:
    """How many upstream legs to close early so that ``connections`` client sockets and ``legs`` upstream ones, with
    the reserve, stay a headroom (1/20 of ``nofile``, at least 16) below the open-file limit: only a
    ``max.connections`` set above two descriptors a client gets there (the default never does)."""
    headroom = max(16, nofile // 20)
    return max(0, connections + legs + DESCRIPTOR_RESERVE + headroom - nofile)


def bounded_by_descriptors(config: ConnectionQuotaConfig, budget: int,
                           ceiling: int | None = None) -> ConnectionQuotaConfig:
    """``config`` with ``max.connections`` within the descriptors: the default (unset) becomes ``budget`` (two a
    connection); a setting above ``ceiling`` (the budget, or one descriptor a connection while idle upstream legs
    are closed) is lowered to it, with a warning (it would otherwise end in EMFILE); one between the two is kept,
    with a warning that it counts on idle clients."""
    ceiling = budget if ceiling is None else max(budget, ceiling)
    if config.max_connections <= budget:
        return config
    if config.max_connections == INT_MAX:
        return dataclasses.replace(config, max_connections=budget)
    nofile = budget * DESCRIPTORS_PER_CONNECTION + DESCRIPTOR_RESERVE
    if config.max_connections <= ceiling:
        log.warning("max.connections=%d is more than the open-file limit (%d) allows with every client active (2 "
                    "descriptors each, %d clients): it counts on idle clients, whose upstream connections are closed "
                    "(quotaflow.upstream.connections.max.idle.ms)", config.max_connections, nofile, budget)
        return config
    log.warning("max.connections=%d is more than the open-file limit allows (%d descriptors, %d per connection): "
                "using %d; raise the limit (ulimit -n) to allow more", config.max_connections, nofile,
                DESCRIPTORS_PER_CONNECTION if ceiling == budget else DESCRIPTORS_PER_IDLE_CONNECTION, ceiling)
    return dataclasses.replace(config, max_connections=ceiling)
