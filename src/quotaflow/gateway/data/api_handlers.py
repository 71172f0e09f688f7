"""What the gateway does per API, as a table keyed by ApiKey instead of branches on the key in the connection.

Each :class:`ApiHandler` has up to four hooks, all optional but ``decide``:

* ``request``: the request before it is forwarded (Produce: acks and read-one-at-a-time; Fetch: ``max_bytes`` cap;
  CreateTopics: the controller-mutation quota, KIP-599); returns the frame to forward, or None when nothing awaits
  an upstream response;
* ``decide``: the quota decisions when the response is ready (KIP-219): bandwidth and request quotas for Produce
  and Fetch (a Fetch response beyond its quota cap is first cut to it, ``pending.response``), request with
  controller mutation for CreateTopics, the request quota (or its exemption) for the rest;
* ``response``: the response before it is sent (address rewrite for Metadata, FindCoordinator and DescribeCluster;
  the ApiVersions merge; an empty throttled Fetch, or the cut one; SASL passthrough); None leaves it to the default
  (throttle field);
* ``local``: the answer the gateway makes itself: ApiVersions (18) before authentication, SaslHandshake (17) and
  SaslAuthenticate (36) in terminate mode, DescribeClientQuotas (48) and AlterClientQuotas (49), DescribeAcls (29),
  CreateAcls (30) and DeleteAcls (31).

Hooks see the connection through :class:`HandlerScope`, never the connection class itself.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final, Protocol

from kafka.protocol.api_key import ApiKey

from quotaflow.core.errors import ConnectionClosed, InvalidRequestError, QuotaflowError, map_errors
from quotaflow.engine import NOT_THROTTLED, ThrottleDecision
from quotaflow.gateway.auth import authorize, scram_admin
from quotaflow.gateway.data import mutations, versions
from quotaflow.gateway.data.addresses import REWRITTEN_APIS, rewrite_addresses
from quotaflow.gateway.data.brokers import UpstreamUnavailableError
from quotaflow.gateway.data.enforcement import NO_THROTTLE, RequestDecisions
from quotaflow.gateway.data.pending import Pending
from quotaflow.gateway.data.shadow import ShadowDecisions
from quotaflow.gateway.wire import protocol

if TYPE_CHECKING:
    from quotaflow.gateway.context import ConnectionContext
    from quotaflow.gateway.data.enforcement import Enforcement
    from quotaflow.gateway.data.sasl_session import SaslSession

# a request Kafka cannot parse closes the connection
CLOSE_ON_INVALID: Final[Mapping[type[BaseException], type[QuotaflowError]]] = {InvalidRequestError: ConnectionClosed}
PASS_THROUGH: Final = b"<pass-through>"  # sentinel (identity-compared): send the upstream frame unchanged


class HandlerScope(Protocol):
    """What a hook may use of its connection."""

    @property
    def gateway(self) -> ConnectionContext: ...
    @property
    def listener(self) -> str: ...
    @property
    def principal(self) -> str: ...
    @property
    def client_ip(self) -> str: ...
    @property
    def enforcement(self) -> Enforcement: ...
    @property
    def sasl(self) -> SaslSession: ...

    def hold_limited_produce(self, pending: Pending) -> None:
        """A producer under a finite producer_byte_rate: read nothing more until this produce's response is sent
        and its throttle has passed."""


RequestHook = Callable[[HandlerScope, Pending, bytes], bytes | None]
DecideHook = Callable[["Enforcement", Pending, bytes, str, str, int, int], RequestDecisions]
ResponseHook = Callable[[HandlerScope, Pending, bytes, int], bytes | None]
LocalHook = Callable[[HandlerScope, Any, Pending], Awaitable[Pending]]


# -- quota decisions (when the response is ready) ------------------------------------------------------------

def decide_request(enforcement: Enforcement, pending: Pending, _frame: bytes, user: str, client_id: str,
                   thread_ns: int, now_ms: int) -> RequestDecisions:
    """The request quota, unless the API is exempt (KIP-124)."""
    key = pending.header.api_key
    pending.exempt = enforcement.is_exempt(key)
    throttle = enforcement.request(key, user, client_id, thread_ns, now_ms)
    return RequestDecisions(throttle_ms_request=throttle, throttle_ms=throttle) if throttle else NO_THROTTLE


def _decide_produce(enforcement: Enforcement, pending: Pending, _frame: bytes, user: str, client_id: str,
                    thread_ns: int, now_ms: int) -> RequestDecisions:
    acks = -1 if pending.acks is None else pending.acks
    pending.exempt = acks == 0
    return produce_decisions(enforcement.produce(user, client_id, pending.request_bytes, thread_ns, acks, now_ms))


def produce_decisions(decision: ThrottleDecision) -> RequestDecisions:
    """A Produce's engine decision as the event log's columns (also the connection-bound Produce path's)."""
    if decision is NOT_THROTTLED:
        return NO_THROTTLE
    return RequestDecisions(throttle_ms_produce=decision.bandwidth_ms, throttle_ms_request=decision.request_ms,
                            throttle_ms=decision.throttle_ms)


def _decide_fetch(enforcement: Enforcement, pending: Pending, frame: bytes, user: str, client_id: str,
                  thread_ns: int, now_ms: int) -> RequestDecisions:
    if not pending.forwarded:
        return decide_request(enforcement, pending, frame, user, client_id, thread_ns, now_ms)
    if pending.fetch_cap is not None:
        room = enforcement.fetch_room(user, client_id, now_ms)
        cap = pending.fetch_cap if room is None else min(pending.fetch_cap, room)
        if len(frame) > cap:
            pending.response = _trimmed(frame, pending.header.api_version, cap)
            if pending.response is not None:
                frame = pending.response
    decision = enforcement.fetch(user, client_id, len(frame), thread_ns, now_ms)
    if decision is NOT_THROTTLED:
        return NO_THROTTLE
    pending.oversized = decision.oversized
    return RequestDecisions(throttle_ms_fetch=decision.bandwidth_ms, throttle_ms_request=decision.request_ms,
                            throttle_ms=decision.throttle_ms)


def _trimmed(frame: bytes, version: int, cap: int) -> bytes | None:
    """The upstream's Fetch response cut to whole batches within ``cap``: the quota's cap, as a Kafka broker would
    have answered the capped request (tansu answers beyond ``max_bytes``), or less, the room left in the consumer's
    quota window now, so that what it gets is not emptied by a throttle (the first batch is always kept, KIP-74);
    None to keep it as it is (nothing to cut, or a response kafka-python cannot decode, which is then decided and
    forwarded unchanged)."""
    try:
        return protocol.trim_fetch_response(frame, version, cap)
    except Exception:  # kafka-python raises assorted errors on malformed input
        return None


def _decide_create_topics(enforcement: Enforcement, pending: Pending, frame: bytes, user: str, client_id: str,
                          thread_ns: int, now_ms: int) -> RequestDecisions:
    if pending.mutations is None:
        return decide_request(enforcement, pending, frame, user, client_id, thread_ns, now_ms)
    mutation, request = enforcement.request_with_mutation(user, client_id, thread_ns, pending.mutations.quota,
                                                          now_ms)
    return RequestDecisions(throttle_ms_request=request, throttle_ms=max(mutation, request))


# -- the same decisions under a running shadow set (gateway.data.shadow), never applied ---------------------------
# Each takes what its live twin took (the request's size, the response's size as it was answered, the same thread
# time and clock reading) and leaves the request alone: what a live hook sets on ``pending`` (the exemption, a Fetch
# response cut to the room left, ``oversized``) is the live decision's.

def _shadow_request(shadow: Enforcement, pending: Pending, _frame: bytes, user: str, client_id: str,
                    thread_ns: int, now_ms: int) -> RequestDecisions:
    throttle = shadow.request(pending.header.api_key, user, client_id, thread_ns, now_ms)
    return RequestDecisions(throttle_ms_request=throttle, throttle_ms=throttle) if throttle else NO_THROTTLE


def _shadow_produce(shadow: Enforcement, pending: Pending, _frame: bytes, user: str, client_id: str,
                    thread_ns: int, now_ms: int) -> RequestDecisions:
    acks = -1 if pending.acks is None else pending.acks
    return produce_decisions(shadow.produce(user, client_id, pending.request_bytes, thread_ns, acks, now_ms))


def _shadow_fetch(shadow: Enforcement, pending: Pending, frame: bytes, user: str, client_id: str,
                  thread_ns: int, now_ms: int) -> RequestDecisions:
    """The response as the live decision left it (cut to the live quota's cap or room, ``pending.response``), which
    is the size the event log records: the shadow's consumer quota meets the bytes that were delivered."""
    if not pending.forwarded:
        return _shadow_request(shadow, pending, frame, user, client_id, thread_ns, now_ms)
    size = len(frame) if pending.response is None else len(pending.response)
    decision = shadow.fetch(user, client_id, size, thread_ns, now_ms)
    if decision is NOT_THROTTLED:
        return NO_THROTTLE
    return RequestDecisions(throttle_ms_fetch=decision.bandwidth_ms, throttle_ms_request=decision.request_ms,
                            throttle_ms=decision.throttle_ms)


def _shadow_create_topics(shadow: Enforcement, pending: Pending, frame: bytes, user: str, client_id: str,
                          thread_ns: int, now_ms: int) -> RequestDecisions:
    """KIP-599 under the shadow: its own controller-mutation quota (``pending.shadow_mutations``, recorded with the
    same topics at the same time as the live one in :func:`_create_topics_request`), then the request quota."""
    quota = pending.shadow_mutations
    if quota is None:
        return _shadow_request(shadow, pending, frame, user, client_id, thread_ns, now_ms)
    mutation, request = shadow.request_with_mutation(user, client_id, thread_ns, quota, now_ms)
    return RequestDecisions(throttle_ms_request=request, throttle_ms=max(mutation, request))


_SHADOW_HOOKS: Final[Mapping[DecideHook, DecideHook]] = {
    decide_request: _shadow_request, _decide_produce: _shadow_produce, _decide_fetch: _shadow_fetch,
    _decide_create_topics: _shadow_create_topics}


def decide_shadow(shadow: Enforcement, pending: Pending, frame: bytes, user: str, now_ms: int) -> ShadowDecisions:
    """``pending`` decided under the shadow set by its API's shadow hook (the twin of the live one), right after the
    live decision and at its clock reading; counted per quota type when it would have throttled."""
    header = pending.header
    handler = pending.handler or HANDLERS.get(header.api_key, DEFAULT)
    client_id = header.client_id or ""
    decided = _SHADOW_HOOKS[handler.decide](shadow, pending, frame, user, client_id, pending.thread_ns, now_ms)
    no_throttle = shadow.no_throttle
    assert no_throttle is not None  # (a shadow's own managers: Enforcement(shadow_id=...))
    if decided is NO_THROTTLE or not decided.throttle_ms:
        return no_throttle
    counts, m = shadow.throttled, shadow.managers  # counted per quota-id: the tags of its throttle-time series
    if decided.throttle_ms_produce:
        counts.add("produce", *m.produce.quota_id(user, client_id))
    if decided.throttle_ms_fetch:
        counts.add("fetch", *m.fetch.quota_id(user, client_id))
    if decided.throttle_ms_request:
        counts.add("request", *m.request.quota_id(user, client_id))
    return ShadowDecisions(no_throttle.shadow_id, decided.throttle_ms_produce, decided.throttle_ms_fetch,
                           decided.throttle_ms_request, decided.throttle_ms)


# -- requests on their way upstream ----------------------------------------------------------------------------

def _produce_request(scope: HandlerScope, pending: Pending, frame: bytes) -> bytes | None:
    if pending.acks is None:  # read with the header (gateway.wire.frame_facts) unless it could not be
        raise ConnectionClosed("Produce request too short for acks")
    scope.hold_limited_produce(pending)
    if pending.acks == 0:  # no response will come; the writer still decides it and applies the mute
        pending.forward = frame
        pending.local = b""
        return None
    return frame


def _fetch_request(scope: HandlerScope, pending: Pending, frame: bytes) -> bytes | None:
    """``max_bytes = min(request's, fetch.max.bytes, the consumer quota's window)``, as KafkaApis does: the
    broker setting bounds one response's memory, and without the quota cap a response larger than the window
    allows would be throttled, answered empty and re-fetched forever."""
    header = pending.header
    if header.api_version < 3:
        return frame
    cap = scope.gateway.config.fetch_max_bytes
    quota_cap = scope.enforcement.fetch_max_bytes(scope.principal, header.client_id or "")
    if quota_cap is not None:
        cap = min(cap, quota_cap)
        pending.fetch_cap = cap  # the response is held to it too, in whole batches (_decide_fetch)
    with map_errors(CLOSE_ON_INVALID):
        return protocol.cap_fetch_max_bytes(frame, header, cap)


def _create_topics_request(scope: HandlerScope, pending: Pending, frame: bytes) -> bytes | None:
    """KIP-599 on CreateTopics, CreatePartitions and DeleteTopics: the request to forward (refused topics cut
    out), or None if none is left. Partition counts were fetched by :func:`prepare_request` just before."""
    header = pending.header
    shadow = scope.enforcement.shadow
    if shadow is not None:  # the shadow's own quota meets the same topics at the same time (never applied)
        shadow_quota = shadow.mutation_quota(scope.principal, header.client_id or "", header.api_key,
                                             header.api_version, pending.received_ms)
        if shadow_quota is not None:
            with map_errors(CLOSE_ON_INVALID):
                mutations.decide(frame, header, shadow_quota, pending.received_ms,
                                 scope.gateway.partition_counts.count)
            pending.shadow_mutations = shadow_quota
    quota = scope.enforcement.mutation_quota(scope.principal, header.client_id or "", header.api_key,
                                             header.api_version, pending.received_ms)
    if quota is None:
        return frame
    with map_errors(CLOSE_ON_INVALID):
        pending.mutations = mutations.decide(frame, header, quota, pending.received_ms,
                                             scope.gateway.partition_counts.count)
    if pending.mutations.forward is None:
        pending.local = mutations.local_response(header.api_key, header.api_version, header.correlation_id,
                                                 pending.mutations.refused)
    return pending.mutations.forward


COUNTED_API_KEYS: Final = frozenset(int(key) for key in mutations.NEEDS_COUNTS)
"""The API keys (a request frame's first two bytes) that ``prepare_request`` may have work for: a connection looks
at a frame's key before it calls :func:`needs_partition_counts` (a C-level check for every other request)."""


def needs_partition_counts(scope: HandlerScope, frame: bytes) -> bool:
    """Whether ``prepare_request`` has anything to do for this frame (a look at two bytes for most), so that a
    connection runs it only then (it waits on the upstream)."""
    if len(frame) < 2 or ((frame[0] << 8) | frame[1]) not in COUNTED_API_KEYS or scope.sasl.pending_auth:
        return False
    return scope.enforcement.mutations_metered(scope.principal)


async def prepare_request(scope: HandlerScope, frame: bytes) -> None:
    """Before a DeleteTopics or CreatePartitions is decided under a controller-mutation quota: the upstream's
    partition counts of its topics (their permits). Anything else returns at once (a look at two bytes).

    This runs before the request hooks, so it asks only about the topics the client may name
    (``authorize.nameable_topics``: never quotaflow's own, and with an authorizer only those it may DELETE /
    ALTER), and never about a topic id (an id cannot be authorized; those versions are not offered): the lookup
    uses the gateway's own connection, and neither its timing nor the throttle it leads to may tell a client
    whether a topic it may not see exists, or how many partitions it has. The request hook then cuts the refused
    topics before metering, so they cost nothing."""
    if not needs_partition_counts(scope, frame):
        return
    try:
        header = protocol.parse_request_header(frame)
        names, _ids = mutations.count_requests(frame, header)
    except InvalidRequestError:
        return  # the request path reports it
    names = authorize.nameable_topics(scope.gateway.access, scope.principal, scope.client_ip, header.api_key, names)
    if names:
        await scope.gateway.partition_counts.refresh(names)


# -- responses on their way to the client ----------------------------------------------------------------------

def rewrite(scope: HandlerScope, frame: bytes, key: int, version: int, throttle: int) -> bytes:
    """An upstream response re-encoded: addresses rewritten (for the APIs that name brokers), throttle attached."""
    known = protocol.max_known_version(key)
    if known is None or version > known:  # forwarded undecoded: the client is muted, not told
        return protocol.SIZE.pack(len(frame)) + frame
    message = protocol.decode_response(frame, key, version)
    if key in REWRITTEN_APIS:
        rewrite_addresses(message, key, scope.gateway.address_map(scope.listener))
    if throttle > 0 and protocol.has_throttle_field(message):
        message.throttle_time_ms = max(int(message.throttle_time_ms), throttle)
    return protocol.encode_response(message, version, protocol.response_correlation_id(frame))


def _address_response(scope: HandlerScope, pending: Pending, frame: bytes, throttle: int) -> bytes | None:
    if not pending.forwarded:
        return None
    header = pending.header
    return rewrite(scope, frame, header.api_key, header.api_version, throttle)


def _sasl_response(scope: HandlerScope, pending: Pending, frame: bytes, _throttle: int) -> bytes | None:
    if scope.sasl.passthrough is not None and pending.forwarded:  # the broker's answer, as it is
        hold = scope.sasl.watch_response(pending.header.api_key, pending.header.api_version, frame)
        if hold > 0:  # the principal is over its connection creation rate: nothing sent, held, then closed
            pending.hold_then_close_ms = hold
            return b""
        return PASS_THROUGH
    return frame


def _create_topics_response(_scope: HandlerScope, pending: Pending, frame: bytes, throttle: int) -> bytes | None:
    if pending.mutations is None:
        return None
    version = pending.header.api_version
    if not pending.forwarded:
        return protocol.set_throttle(frame[4:], pending.header.api_key, version, throttle) or frame
    return mutations.merge_response(frame, pending.header.api_key, version, pending.mutations.refused, throttle)


def _fetch_response(scope: HandlerScope, pending: Pending, frame: bytes, throttle: int) -> bytes | None:
    """A throttled fetch is answered empty (Kafka's rule), unless it is larger than the quota window holds: then it
    is delivered with its throttle, so the consumer always makes progress. A response cut to the quota's cap
    (``_decide_fetch``) is sent as cut."""
    if not pending.forwarded:
        return None
    header = pending.header
    body = frame if pending.response is None else pending.response
    if throttle > 0 and not pending.oversized:
        return protocol.empty_fetch_response(body, header.api_version, throttle)
    if pending.response is None:
        return None
    if throttle > 0:
        return rewrite(scope, body, header.api_key, header.api_version, throttle)
    return protocol.SIZE.pack(len(body)) + body


def _api_versions_response(scope: HandlerScope, pending: Pending, frame: bytes, throttle: int) -> bytes | None:
    if not pending.forwarded:
        return None
    passthrough = scope.sasl.passthrough is not None
    return versions.rewrite_response(frame, pending.header.api_version, throttle, sasl_passthrough=passthrough,
                                     authorizer=scope.gateway.access.authorizer is not None)


# -- authorization (gateway.auth.authorize): wraps the other hooks of every forwarded API ---------------------------

def _authorize_request(inner: RequestHook | None) -> RequestHook:
    """Authorize, then run the API's own request hook on what is left to forward. Everything refused: answered
    here (``pending.local``; b"" for an acks=0 produce), nothing forwarded."""
    def hook(scope: HandlerScope, pending: Pending, frame: bytes) -> bytes | None:
        header = pending.header
        access = scope.gateway.access
        limit = authorize.SCAN_ONLY.get(header.api_key) if access.authorizer is None else None
        if limit is not None and len(frame) <= limit and not access.hidden.may_name(frame):
            return frame if inner is None else inner(scope, pending, frame)  # nothing to authorize or hide
        try:  # (try/except, not map_errors: this runs for every request)
            plan = authorize.granted(access, scope.principal, scope.client_ip, header, frame)
            if plan is authorize.UNDECIDED:
                plan = authorize.plan(access, scope, header, frame, scope.client_ip)
            if plan is not None:
                pending.authz = plan
                if plan.forward is None:
                    if header.api_key == ApiKey.Produce and pending.acks is None:
                        raise ConnectionClosed("Produce request too short for acks")
                    pending.local = plan.local
                    return None
                frame = plan.forward
        except InvalidRequestError as e:  # a request Kafka cannot parse closes the connection
            raise ConnectionClosed(str(e)) from e
        except PermissionError as e:
            raise ConnectionClosed(str(e)) from e
        if inner is None:
            return frame
        forward = inner(scope, pending, frame)
        if forward is None and pending.local and plan is not None and plan.merge is not None:
            # the API's own hook answered the rest here (CreateTopics: every remaining topic over the mutation
            # quota): the refused topics go into that answer too
            header_key, version = header.api_key, header.api_version
            message = protocol.decode_response(pending.local[4:], header_key, version)
            plan.merge(message)
            pending.local = protocol.encode_response(message, version, header.correlation_id)
        return forward
    return hook


def _authorize_response(inner: ResponseHook | None) -> ResponseHook:
    """Merge the refused parts back into the upstream's response (decoded once, with the address rewrite and the
    throttle); otherwise the API's own response hook."""
    def hook(scope: HandlerScope, pending: Pending, frame: bytes, throttle: int) -> bytes | None:
        plan = pending.authz
        header = pending.header
        key, version = header.api_key, header.api_version
        if plan is None or plan.merge is None or not pending.forwarded \
                or (plan.merge_if_named and not scope.gateway.access.hidden.may_name(frame)) \
                or (key == ApiKey.Fetch and throttle > 0):
            return None if inner is None else inner(scope, pending, frame, throttle)
        if pending.mutations is not None and inner is not None:  # CreateTopics' own merge first
            out = inner(scope, pending, frame, throttle)
            assert out is not None and out is not PASS_THROUGH
            message = protocol.decode_response(out[4:], key, version)
        else:
            message = protocol.decode_response(frame, key, version)
            if key in REWRITTEN_APIS:
                rewrite_addresses(message, key, scope.gateway.address_map(scope.listener))
        plan.merge(message)
        if throttle > 0 and protocol.has_throttle_field(message):
            message.throttle_time_ms = max(int(message.throttle_time_ms), throttle)
        return protocol.encode_response(message, version, header.correlation_id)
    return hook


def _authorized(handler: ApiHandler) -> ApiHandler:
    return replace(handler, request=_authorize_request(handler.request),
                   planned_response=_authorize_response(handler.response))


# -- answered by the gateway itself ----------------------------------------------------------------------------

async def _api_versions_before_auth(scope: HandlerScope, _request: Any, pending: Pending) -> Pending:
    """ApiVersions from a client that has not authenticated: the upstream's list (fetched once for everyone
    by the gateway), merged with the gateway's own APIs, as the forwarded answer would be."""
    try:
        upstream = await scope.gateway.upstream_api_versions()
    except UpstreamUnavailableError as e:
        raise ConnectionClosed(str(e)) from e
    version = pending.header.api_version
    cls = protocol.response_class(ApiKey.ApiVersions, version)
    merged = versions.merge(upstream, authorizer=scope.gateway.access.authorizer is not None)
    keys = [cls.ApiVersion(api_key=k, min_version=lo, max_version=hi) for k, lo, hi in merged]
    pending.local = protocol.encode_response(cls(error_code=0, api_keys=keys), version,
                                             pending.header.correlation_id)
    return pending


async def _sasl_handshake(scope: HandlerScope, request: Any, pending: Pending) -> Pending:
    return scope.sasl.handshake(request, pending)


async def _sasl_authenticate(scope: HandlerScope, request: Any, pending: Pending) -> Pending:
    return await scope.sasl.authenticate(request, pending)


async def _quota_admin(scope: HandlerScope, request: Any, pending: Pending) -> Pending:
    """DescribeClientQuotas and AlterClientQuotas against the store (KIP-546): DESCRIBE_CONFIGS / ALTER_CONFIGS on
    the cluster (``authorize.cluster_allowed``: the authorizer, else the admin list)."""
    header = pending.header
    allowed = authorize.cluster_allowed(scope.gateway.access, scope, header.api_key, scope.client_ip,
                                        authorize.OP.DESCRIBE_CONFIGS if header.api_key == ApiKey.DescribeClientQuotas
                                        else authorize.OP.ALTER_CONFIGS)
    encoded, executor_ns = await scope.gateway.quota_admin.handle(header.api_key, header.api_version, request,
                                                                  allowed=allowed,
                                                                  correlation_id=header.correlation_id)
    pending.thread_ns += executor_ns
    pending.local = encoded
    return pending


async def _acl_admin(scope: HandlerScope, request: Any, pending: Pending) -> Pending:
    """DescribeAcls, CreateAcls and DeleteAcls against the store (``gateway.auth.acl_admin``): DESCRIBE / ALTER on the
    cluster, through the one cluster check (``authorize.cluster_allowed``)."""
    header = pending.header
    allowed = authorize.cluster_allowed(scope.gateway.access, scope, header.api_key, scope.client_ip,
                                        authorize.OP.DESCRIBE if header.api_key == ApiKey.DescribeAcls
                                        else authorize.OP.ALTER)
    encoded, executor_ns = await scope.gateway.acl_admin.handle(header.api_key, header.api_version, request,
                                                                allowed, correlation_id=header.correlation_id)
    pending.thread_ns += executor_ns
    pending.local = encoded
    return pending


@dataclass(frozen=True, slots=True)
class ApiHandler:
    """The hooks of one API (see the module docstring)."""

    request: RequestHook | None = None
    decide: DecideHook = decide_request
    response: ResponseHook | None = None
    local: LocalHook | None = None
    planned_response: ResponseHook | None = None
    """The response hook of a request the authorization hook made a plan for (``pending.authz``: refused parts to
    merge back); None: ``response``. A request forwarded as it came runs only ``response``: no wrapper call."""


async def _scram_admin(scope: HandlerScope, request: Any, pending: Pending) -> Pending:
    """DescribeUserScramCredentials (50) / AlterUserScramCredentials (51), KIP-554, from the gateway's own
    credentials (terminate mode; in SASL passthrough they go to the upstream)."""
    header = pending.header
    allowed = authorize.cluster_allowed(scope.gateway.access, scope, header.api_key, scope.client_ip,
                                        authorize.OP.DESCRIBE if header.api_key == ApiKey.DescribeUserScramCredentials
                                        else authorize.OP.ALTER, super_only=True)
    response, executor_ns = await scram_admin.handle(scope.gateway.scram_admin, header.api_key,
                                                     header.api_version, request, allowed)
    pending.thread_ns += executor_ns
    pending.local = protocol.encode_response(response, header.api_version, header.correlation_id)
    return pending


DEFAULT: Final = _authorized(ApiHandler())
"""Any other API: authorized (refused when the gateway cannot authorize it: ``authorize.PLANNERS``), forwarded as
bytes, the request quota decided, the throttle field set when throttled."""

_ADDRESSES: Final = ApiHandler(response=_address_response)
_OWN: Final[Mapping[int, ApiHandler]] = {
    ApiKey.Produce: ApiHandler(request=_produce_request, decide=_decide_produce),
    ApiKey.Fetch: ApiHandler(request=_fetch_request, decide=_decide_fetch, response=_fetch_response),
    **{key: ApiHandler(request=_create_topics_request, decide=_decide_create_topics,
                       response=_create_topics_response) for key in mutations.METERED_APIS},
    ApiKey.ApiVersions: ApiHandler(response=_api_versions_response, local=_api_versions_before_auth),
    ApiKey.SaslHandshake: ApiHandler(response=_sasl_response, local=_sasl_handshake),
    ApiKey.SaslAuthenticate: ApiHandler(response=_sasl_response, local=_sasl_authenticate),
    ApiKey.DescribeClientQuotas: ApiHandler(local=_quota_admin),
    ApiKey.AlterClientQuotas: ApiHandler(local=_quota_admin),
    ApiKey.DescribeUserScramCredentials: ApiHandler(local=_scram_admin),
    ApiKey.AlterUserScramCredentials: ApiHandler(local=_scram_admin),
    ApiKey.DescribeAcls: ApiHandler(local=_acl_admin),
    ApiKey.CreateAcls: ApiHandler(local=_acl_admin),
    ApiKey.DeleteAcls: ApiHandler(local=_acl_admin),
    **{key: _ADDRESSES for key in REWRITTEN_APIS},
}
_UNWRAPPED: Final = versions.SASL_APIS | {ApiKey.ApiVersions}
HANDLERS: Final[Mapping[int, ApiHandler]] = {
    **{key: DEFAULT for key in authorize.PLANNERS},
    **{key: handler if key in _UNWRAPPED else _authorized(handler) for key, handler in _OWN.items()},
}
LOCAL_APIS: Final = frozenset({ApiKey.SaslHandshake, ApiKey.SaslAuthenticate, ApiKey.DescribeClientQuotas,
                               ApiKey.AlterClientQuotas, ApiKey.DescribeAcls, ApiKey.CreateAcls, ApiKey.DeleteAcls,
                               ApiKey.DescribeUserScramCredentials, ApiKey.AlterUserScramCredentials})
"""Answered by the gateway (SASL, the ACL APIs and KIP-554 only when it terminates SASL:
``versions.PASSTHROUGH_APIS``); ApiVersions only before authentication."""
