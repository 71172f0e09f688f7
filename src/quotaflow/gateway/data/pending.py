"""One request on its way through the gateway: what the connection, its API handlers and the event log share.

Compiled by Cython as an extension type (``pending.pxd`` declares its fields), as the connection core that makes one
per request is: made in C (a 24-field ``__init__`` run as bytecode cost several µs a request with cold caches), its
fields read by the compiled core as C struct members. This plain-Python source is its pure twin; ``COMPILED`` says
which form was imported."""

from __future__ import annotations

from typing import Any, Final

import cython

from quotaflow.gateway.data.enforcement import NO_DECISIONS, RequestDecisions
from quotaflow.gateway.data.mutations import TopicQuotaDecision
from quotaflow.gateway.wire import protocol

COMPILED: bool = cython.compiled
"""True when the Cython-compiled form of this module was imported."""

RAW_SASL: Final = -1  # pseudo api version marking a SaslHandshake-v0 raw token exchange


class Pending:
    """One request on its way through the gateway."""

    header: protocol.RequestHeader
    request_bytes: int
    received_ms: int
    thread_ns: int  # event-loop time (and executor CPU time) spent on this request so far ("io thread")
    network_ns: int  # event-loop time from taking its response to having written it ("network thread")
    acks: int | None
    local: bytes | None  # a response the gateway made itself
    forwarded: bool  # sent to the upstream, whose response it waits for (else answered here)
    reply: bytes | None  # the upstream's response, once read (with its size prefix when ``framed``)
    forward: bytes | None  # the frame to send upstream (once the upstream connection is there)
    # the frame held has its size prefix, as it came: ``forward`` until it is sent, then ``reply`` once read
    framed: bool
    # a Produce decided through its connection's kept sensor (connection.ProduceBinding): forwarded as it came, and
    # its response read with its size prefix, to go back as it came unless it is throttled
    bound: bool
    local_api_versions: bool  # ApiVersions before SASL authentication: answered from the gateway's cache
    close_after: bool
    hold_then_close_ms: int  # nothing is sent; the connection is held this long, then closed (KIP-612's way)
    holds_reading: bool  # a rate-limited produce: no further reads until its response + throttle
    # exempt from the request quota (Kafka's ClientRequestQuotaManager exemptions, KIP-124): its thread time goes
    # to the exempt-request-time sensor
    exempt: bool
    mutations: TopicQuotaDecision | None  # CreateTopics, CreatePartitions, DeleteTopics under KIP-599
    fetch_cap: int | None  # a Fetch under a consumer quota: the max_bytes it was capped to
    response: bytes | None  # the upstream response as answered, when cut before its decision (Fetch)
    # a Fetch response larger than the consumer quota's window holds: delivered with its throttle, not emptied
    oversized: bool
    decisions: RequestDecisions
    # the same request decided under a running shadow set (gateway.data.shadow.ShadowDecisions), None without one
    shadow: Any
    shadow_mutations: Any  # the shadow's controller-mutation quota of a CreateTopics-like request (KIP-599)
    authz: Any  # the authorization plan (gateway.auth.authorize.Plan) when the request was rewritten or refused
    handler: Any  # its API's hooks (gateway.data.api_handlers.ApiHandler), looked up once when it was taken
    if not cython.compiled:  # the pure twin: these fields and no others (compiled: pending.pxd's)
        __slots__ = tuple(__annotations__)

    def __init__(self, header: protocol.RequestHeader, request_bytes: int, received_ms: int, *, thread_ns: int = 0,
                 network_ns: int = 0, acks: int | None = None, decisions: RequestDecisions = NO_DECISIONS) -> None:
        self.header = header
        self.request_bytes = request_bytes
        self.received_ms = received_ms
        self.thread_ns = thread_ns
        self.network_ns = network_ns
        self.acks = acks
        self.local = None
        self.forwarded = False
        self.reply = None
        self.forward = None
        self.framed = False
        self.bound = False
        self.local_api_versions = False
        self.close_after = False
        self.hold_then_close_ms = 0
        self.holds_reading = False
        self.exempt = False
        self.mutations = None
        self.fetch_cap = None
        self.response = None
        self.oversized = False
        self.decisions = decisions
        self.shadow = None
        self.shadow_mutations = None
        self.authz = None
        self.handler = None


def new_pending(header: protocol.RequestHeader, request_bytes: cython.Py_ssize_t,
                received_ms: cython.longlong) -> Pending:
    """``Pending(header, request_bytes, received_ms)``, made by the compiled core for every request it reads:
    compiled, the extension type's allocation with its fields set in C (every other field starts as ``__init__``
    leaves it: None, 0 or False), without a call through the type and ``__init__``'s argument parsing."""
    if cython.compiled:
        pending: Pending = Pending.__new__(Pending)
        pending.header = header
        pending.request_bytes = request_bytes
        pending.received_ms = received_ms
        pending.decisions = NO_DECISIONS
        return pending
    return Pending(header, request_bytes, received_ms)


def request_row(broker: str, listener: str, user: str, client_ip: str, pending: Pending,
                response_bytes: cython.Py_ssize_t, now_ms: cython.longlong, seq: cython.longlong) -> tuple[Any, ...]:
    """``pending``'s row in the usage event log, answered by the connection ``broker`` / ``listener`` / ``user`` /
    ``client_ip`` with ``response_bytes`` at ``now_ms``: one tuple in ``REQUEST_LOG_SCHEMA``'s column order
    (``observation.eventlog.RequestRow``). Built here, where the compiled core reads the request's fields as C
    struct members, so that logging a request costs no Python frame. A request decided under a running shadow set
    has the ``SHADOW_REQUEST_FIELDS`` after them (``ShadowRequestRow``: the gateway appends those to the event
    log's shadow queue, ``EventLog.shadow_request_rows``, for exactly as long as the shadow runs)."""
    # a RequestHeader read by position, (api_key, api_version, correlation_id, client_id, ...): no attribute lookups
    header = cython.cast(tuple, pending.header)
    decisions = pending.decisions
    version = header[1]  # RAW_SASL (a raw token exchange) is logged as version 0
    acks = pending.acks
    if acks is not None and not -128 <= acks <= 127:  # an int16 on the wire, an int8 column: a tenant's acks=1000
        acks = 127 if acks > 0 else -128  # must not stop the log; replay only asks whether it is 0
    shadow = pending.shadow
    if shadow is None:
        return (now_ms, broker, listener, user, header[3] or "", client_ip, header[0],
                version if version > 0 else 0, pending.request_bytes, response_bytes, pending.thread_ns,
                pending.network_ns, acks, False, seq, decisions.throttle_ms_produce, decisions.throttle_ms_fetch,
                decisions.throttle_ms_request, decisions.throttle_ms)
    return (now_ms, broker, listener, user, header[3] or "", client_ip, header[0],
            version if version > 0 else 0, pending.request_bytes, response_bytes, pending.thread_ns,
            pending.network_ns, acks, False, seq, decisions.throttle_ms_produce, decisions.throttle_ms_fetch,
            decisions.throttle_ms_request, decisions.throttle_ms, shadow.shadow_id, shadow.throttle_ms_produce,
            shadow.throttle_ms_fetch, shadow.throttle_ms_request, shadow.throttle_ms)
