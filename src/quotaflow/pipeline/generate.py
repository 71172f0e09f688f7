"""Deterministic synthetic multi-tenant Kafka traffic, generated in vectorised chunks (numpy), written as Parquet.

The shape exercises every quota path: heavy-tailed tenant sizes (Zipf weights), bursts (a few tenants take a
large share of traffic for seconds at a time), produce with acks 0/1/all, consumer and follower fetches, other
APIs including cluster actions, several brokers and listeners, clients that open a connection per request, and one
connection storm from a single IP. ``--events N`` counts request events; connection events come on top.

The same (events, seed, chunk size) always gives byte-identical data: every chunk draws from its own generator
spawned from the seed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from quotaflow.events import API_FETCH, API_PRODUCE, CONNECTION_SCHEMA, CONNECTIONS_DIR, REQUEST_SCHEMA, REQUESTS_DIR

START_MS: Final = 1_700_000_000_000
REPLICATION_LISTENER: Final = "REPLICATION"
CLIENT_LISTENERS: Final = ("PLAINTEXT", "SASL_SSL")
OTHER_API_KEYS: Final = np.array([3, 8, 9, 10, 11, 12, 18, 19, 4], dtype=np.int16)  # metadata, offsets, ..., LAIR
OTHER_API_P: Final = np.array([0.35, 0.15, 0.1, 0.1, 0.1, 0.12, 0.03, 0.03, 0.02])


@dataclass(frozen=True, slots=True)
class TrafficSpec:
    events: int
    seed: int = 0
    brokers: int = 3
    tenants: int = 200
    rate: int = 20_000  # request events per second, cluster-wide
    chunk_events: int = 1_000_000
    start_ms: int = START_MS


@dataclass(frozen=True, slots=True)
class Population:
    """Clients (one row per client): tenant user, client-id, IP, listener, API mix and size scale."""

    user: np.ndarray  # object[str]
    client_id: np.ndarray
    client_ip: np.ndarray
    listener: np.ndarray
    weight: np.ndarray  # float64, sums to 1
    produce_p: np.ndarray
    size_scale: np.ndarray
    per_request_conn: np.ndarray  # bool: opens a connection for every request
    tenant: np.ndarray  # int


def population(spec: TrafficSpec) -> Population:
    """The fixed client population for a seed: tenant sizes follow a Zipf law (a few tenants dominate)."""
    rng = np.random.default_rng([spec.seed, 1])
    users, cids, ips, listeners, weights, pprod, scale, per_conn, tenant = [], [], [], [], [], [], [], [], []
    tenant_w = 1.0 / np.arange(1, spec.tenants + 1) ** 1.1
    for t in range(spec.tenants):
        n_clients = int(rng.integers(1, 6))
        user = "ANONYMOUS" if t == spec.tenants - 1 else f"tenant-{t:04d}"
        listener = CLIENT_LISTENERS[int(rng.integers(0, len(CLIENT_LISTENERS)))]
        share = rng.dirichlet(np.ones(n_clients))
        for c in range(n_clients):
            users.append(user)
            cids.append("" if (t % 17 == 5 and c == 0) else f"{user}-app-{c}")
            ips.append(f"10.{t // 250}.{t % 250}.{c + 1}")
            listeners.append(listener)
            weights.append(tenant_w[t] * share[c])
            pprod.append(float(rng.uniform(0.1, 0.8)))
            scale.append(float(rng.lognormal(0.0, 1.0)))
            per_conn.append(t % 23 == 7 and c == 0)
            tenant.append(t)
    w = np.asarray(weights)
    return Population(
        np.asarray(users, dtype=object),
        np.asarray(cids, dtype=object),
        np.asarray(ips, dtype=object),
        np.asarray(listeners, dtype=object),
        w / w.sum(),
        np.asarray(pprod),
        np.asarray(scale),
        np.asarray(per_conn, dtype=bool),
        np.asarray(tenant),
    )


def _strings(values: np.ndarray, idx: np.ndarray) -> pa.Array:
    dictionary = pa.array(list(values), pa.string())
    return pa.DictionaryArray.from_arrays(pa.array(idx, pa.int32()), dictionary).cast(pa.string())


def _chunk(
    spec: TrafficSpec, pop: Population, index: int, n: int, seq0: int, conn_seq0: int
) -> tuple[pa.Table, pa.Table]:
    """One time slice: ``n`` request events plus their connection events."""
    rng = np.random.default_rng([spec.seed, 2, index])
    span_ms = max(1, round(spec.chunk_events * 1000 / spec.rate))
    t0 = spec.start_ms + index * span_ms
    ts = t0 + np.sort(rng.integers(0, max(1, round(n * 1000 / spec.rate)), n))
    client = rng.choice(len(pop.weight), size=n, p=pop.weight)
    # Bursts: in a few windows of 2-8 s one of the big tenants' clients takes 40 % of the traffic.
    for _ in range(3):
        b_start = t0 + int(rng.integers(0, span_ms))
        b_len = int(rng.integers(2_000, 8_000))
        b_client = int(rng.integers(0, min(20, len(pop.weight))))
        in_burst = (ts >= b_start) & (ts < b_start + b_len) & (rng.random(n) < 0.4)
        client[in_burst] = b_client
    broker = rng.integers(0, spec.brokers, n)
    kind = rng.random(n)
    follower = kind < 0.04
    produce = ~follower & (kind < 0.04 + 0.88 * pop.produce_p[client])
    fetch = ~follower & ~produce & (kind < 0.92)
    other = ~(follower | produce | fetch)
    api_key = np.where(produce, API_PRODUCE, API_FETCH).astype(np.int16)
    api_key[other] = rng.choice(OTHER_API_KEYS, size=int(other.sum()), p=OTHER_API_P)
    api_version = np.where(produce, 11, np.where(fetch | follower, 16, 12)).astype(np.int16)
    scale = pop.size_scale[client]
    req_bytes = np.where(produce, rng.lognormal(8.5, 1.2, n) * scale, rng.lognormal(4.5, 0.5, n)).astype(np.int64)
    resp_bytes = np.where(fetch | follower, rng.lognormal(9.0, 1.3, n) * scale, rng.lognormal(5.0, 0.6, n))
    io_ns = (rng.lognormal(11.5, 1.0, n) * np.where(produce | fetch, scale, 1.0)).astype(np.int64)
    net_ns = rng.lognormal(10.5, 0.8, n).astype(np.int64)
    acks_choice = rng.choice(np.array([-1, 1, 0], dtype=np.int8), size=n, p=[0.6, 0.3, 0.1])
    acks = pa.array(acks_choice, pa.int8(), mask=~produce)

    # Followers are the other brokers fetching on the replication listener.
    brokers = np.array([f"broker-{b}" for b in range(spec.brokers)], dtype=object)
    users = np.concatenate([pop.user, np.array(["broker"], dtype=object)])
    cids = np.concatenate([pop.client_id, np.array(["replica-fetcher"], dtype=object)])
    ips = np.concatenate([pop.client_ip, np.array([f"192.168.0.{b + 1}" for b in range(spec.brokers)], dtype=object)])
    listeners = np.concatenate([pop.listener, np.array([REPLICATION_LISTENER], dtype=object)])
    user_i = np.where(follower, len(pop.user), client)
    ip_i = np.where(follower, len(pop.client_ip) + (broker + 1) % spec.brokers, client)
    seq = seq0 + np.arange(n, dtype=np.int64)
    requests = pa.table(
        [
            pa.array(ts, pa.int64()),
            _strings(brokers, broker),
            _strings(listeners, user_i),
            _strings(users, user_i),
            _strings(cids, user_i),
            _strings(ips, ip_i),
            pa.array(api_key, pa.int16()),
            pa.array(api_version, pa.int16()),
            pa.array(req_bytes, pa.int64()),
            pa.array(resp_bytes.astype(np.int64), pa.int64()),
            pa.array(io_ns, pa.int64()),
            pa.array(net_ns, pa.int64()),
            acks,
            pa.array(follower, pa.bool_()),
            pa.array(seq, pa.int64()),
        ],
        schema=REQUEST_SCHEMA,
    )

    # Connections: 1 % of requests reconnect, connection-per-request clients connect for every request, and in
    # the chunk's storm one IP opens 500 connections/s for 5 s on one broker.
    reconnect = (rng.random(n) < 0.01) | (pop.per_request_conn[client] & ~follower)
    c_ts = ts[reconnect]
    c_broker = broker[reconnect]
    c_ip = ip_i[reconnect]
    c_listener = user_i[reconnect]
    storm_n = 2_500 if index % 2 == 0 else 0
    storm_ts = t0 + int(rng.integers(0, max(1, span_ms - 5_000))) + np.sort(rng.integers(0, 5_000, storm_n))
    c_ts = np.concatenate([c_ts, storm_ts])
    c_broker = np.concatenate([c_broker, np.zeros(storm_n, dtype=np.int64)])
    c_ip = np.concatenate([c_ip, np.zeros(storm_n, dtype=np.int64) + int(rng.integers(0, len(pop.client_ip)))])
    c_listener = np.concatenate([c_listener, np.zeros(storm_n, dtype=np.int64)])
    order = np.argsort(c_ts, kind="stable")
    conns = pa.table(
        [
            pa.array(c_ts[order], pa.int64()),
            _strings(brokers, c_broker[order]),
            _strings(listeners, c_listener[order]),
            _strings(ips, c_ip[order]),
            pa.array(conn_seq0 + np.arange(len(order), dtype=np.int64), pa.int64()),
        ],
        schema=CONNECTION_SCHEMA,
    )
    return requests, conns


def generate(spec: TrafficSpec, out: Path, progress: Callable[[int], None] | None = None) -> dict[str, int]:
    """Write ``out/requests/part-NNNNN.parquet`` and ``out/connections/part-NNNNN.parquet``; return row counts."""
    if spec.events < 0:
        raise ValueError("events must be >= 0")
    pop = population(spec)
    (out / REQUESTS_DIR).mkdir(parents=True, exist_ok=True)
    (out / CONNECTIONS_DIR).mkdir(parents=True, exist_ok=True)
    counts = {REQUESTS_DIR: 0, CONNECTIONS_DIR: 0}
    index = 0
    while counts[REQUESTS_DIR] < spec.events or index == 0:
        n = min(spec.chunk_events, spec.events - counts[REQUESTS_DIR])
        requests, conns = _chunk(spec, pop, index, n, counts[REQUESTS_DIR], counts[CONNECTIONS_DIR])
        pq.write_table(requests, out / REQUESTS_DIR / f"part-{index:05d}.parquet", compression="snappy")
        pq.write_table(conns, out / CONNECTIONS_DIR / f"part-{index:05d}.parquet", compression="snappy")
        counts[REQUESTS_DIR] += requests.num_rows
        counts[CONNECTIONS_DIR] += conns.num_rows
        if progress is not None:
            progress(requests.num_rows)
        index += 1
        if n == 0:
            break
    return counts
