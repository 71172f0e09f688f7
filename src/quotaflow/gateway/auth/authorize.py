"""Authorization at the gateway, per API, as Kafka's KafkaApis decides it; and quotaflow's own topics hidden.

For each request the gateway forwards, :func:`plan` answers "which resources and operations does it need" and
returns a :class:`Plan`: nothing to do (forward the bytes as they came), the request rewritten without the refused
topics / partitions / groups / resources (and a ``merge`` that puts Kafka's per-resource errors for them back into
the upstream's response), or the whole answer made here when nothing is left to forward. A client cannot tell the
gateway's refusal from a broker's: same error codes (29 TOPIC_, 30 GROUP_, 31 CLUSTER_,
53 TRANSACTIONAL_ID_AUTHORIZATION_FAILED), same partial success, same response shape.

Two layers, one pass:

* quotaflow's own topics (:mod:`quotaflow.gateway.auth.hidden_topics`) are refused in every mode, to every principal,
  with TOPIC_AUTHORIZATION_FAILED, and left out of every listing (Metadata all-topics and regex, OffsetFetch
  all-partitions, DescribeLogDirs, ListPartitionReassignments, DescribeTransactions, DescribeTopicPartitions);
* Kafka's authorizer (``scope.gateway.access.authorizer``, terminate mode only: in SASL passthrough the upstream
  sees each client's own principal and authorizes it) decides the rest, per the table of AUTHORIZER.md.

Only APIs in :data:`PLANNERS` (plus the ones the gateway answers itself) are forwarded: any other API is neither
advertised in ApiVersions nor accepted (the connection is closed, as Kafka closes on an API it does not know),
because the gateway cannot say what it would touch. Nor is a version whose request carries a resource-bearing field
(found in Kafka's message definitions, :mod:`quotaflow.gateway.auth.resources`) that the rule table
(:mod:`quotaflow.gateway.auth.rules`) does not cover: topic ids, brokers' batched forms (:func:`version_range`).

Cost: without an authorizer a request is looked at only when its bytes contain a hidden name (one substring search;
Produce and Fetch read their topic names from the frame instead, :mod:`quotaflow.gateway.auth.topic_names`). With one,
Produce and Fetch are still authorized from those names without a decode; the other APIs are decoded (they are not
the hot path), and only a refusal re-encodes anything.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from kafka.protocol.api_key import ApiKey

from quotaflow.core.acl import CLUSTER_NAME, AclOperation, Authorizer, ResourceType, kafka_principal, principal_allowed
from quotaflow.core.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)
from quotaflow.gateway.auth import rules, topic_names
from quotaflow.gateway.auth.authz_audit import AuthzAudit
from quotaflow.gateway.auth.hidden_topics import RESERVED_PREFIX, HiddenTopics
from quotaflow.gateway.wire import error_response, protocol


class _Admins(Protocol):
    @property
    def admins(self) -> frozenset[str] | None:
        """``--admin-principal`` (None: no list)."""


class _AdminsOf(Protocol):
    @property
    def quota_admin(self) -> _Admins: ...


class Requester(Protocol):
    """What a decision uses of the connection asking: its principal, and its gateway's admin list (the data plane's
    ``HandlerScope`` satisfies it; auth never imports the data plane, which calls it)."""

    @property
    def principal(self) -> str: ...
    @property
    def gateway(self) -> _AdminsOf: ...


OP: Final = AclOperation
RT: Final = ResourceType
NONE: Final = 0
UNKNOWN_TOPIC_OR_PARTITION: Final = 3
TOPIC_AUTHORIZATION_FAILED: Final = TopicAuthorizationFailedError.errno
GROUP_AUTHORIZATION_FAILED: Final = GroupAuthorizationFailedError.errno
CLUSTER_AUTHORIZATION_FAILED: Final = ClusterAuthorizationFailedError.errno
TRANSACTIONAL_ID_AUTHORIZATION_FAILED: Final = TransactionalIdAuthorizationFailedError.errno
OPERATION_NOT_ATTEMPTED: Final = 55
_GENERIC: Final = {e.errno: e.description for e in (TopicAuthorizationFailedError, GroupAuthorizationFailedError,
                                                    ClusterAuthorizationFailedError,
                                                    TransactionalIdAuthorizationFailedError)}
"""Kafka's ``Errors.message()`` of the refusals, for the responses whose Kafka code sends it."""
NO_OPERATIONS: Final = None  # authorized_operations when not asked for (kafka-python's bitfield for -2^31)

TOPIC_OPERATIONS: Final = (OP.READ, OP.WRITE, OP.CREATE, OP.DESCRIBE, OP.DELETE, OP.ALTER, OP.DESCRIBE_CONFIGS,
                           OP.ALTER_CONFIGS)
GROUP_OPERATIONS: Final = (OP.READ, OP.DESCRIBE, OP.DELETE, OP.DESCRIBE_CONFIGS, OP.ALTER_CONFIGS)
CLUSTER_OPERATIONS: Final = (OP.CREATE, OP.CLUSTER_ACTION, OP.DESCRIBE_CONFIGS, OP.ALTER_CONFIGS,
                             OP.IDEMPOTENT_WRITE, OP.ALTER, OP.DESCRIBE)

# config resource types (DescribeConfigs / AlterConfigs / IncrementalAlterConfigs)
_CONFIG_TOPIC, _CONFIG_BROKER, _CONFIG_BROKER_LOGGER, _CONFIG_CLIENT_METRICS, _CONFIG_GROUP = 2, 4, 8, 16, 32


DECISION_CACHE_MAX: Final = 65_536  # cached decisions before the cache starts over


class Access:
    """What the gateway authorizes with: Kafka's authorizer (None: allow all, as a broker without
    ``authorizer.class.name``, and always None in SASL passthrough), the hidden topics, the audit sink.

    Decisions are cached per (principal, host, operation, resource) for as long as the authorizer's
    ``generation`` (:class:`quotaflow.core.acl.Authorizer`) keeps its value: the StandardAuthorizer moves it on
    every ``load``, so an ACL change made anywhere (this gateway, another one, ``quotaflow acls``, the console)
    applies to the first request after the store refresh loads it. An authorizer whose generation is None is asked
    every time."""

    def __init__(self, authorizer: Authorizer | None, hidden: HiddenTopics, audit: AuthzAudit | None = None, *,
                 own: Authorizer | None = None) -> None:
        self.authorizer = authorizer
        # the configured authorizer, which decides the APIs the gateway answers from its own store in every mode
        # (:func:`cluster_allowed`); in SASL passthrough ``authorizer`` is None (the cluster decides what is
        # forwarded) but the cluster knows nothing of the gateway's quotas
        self.own = own if own is not None else authorizer
        self.hidden = hidden
        self.audit = audit or AuthzAudit()
        self._cache: dict[tuple[str, str, int, int, str], bool] = {}
        self._cached_from: Authorizer | None = None  # the authorizer and generation the cache was computed from
        self._cached_generation: int | None = None
        self.principals: dict[str, str] = {}  # session user -> Kafka's principal string (``User:alice``)

    def decide(self, authorizer: Authorizer, principal: str, host: str, op: AclOperation, rtype: ResourceType,
               name: str) -> bool:
        number = authorizer.generation
        if number is None:
            return bool(authorizer.authorize(principal, host, op, rtype, name))
        cache = self._cache
        if number != self._cached_generation or authorizer is not self._cached_from:
            cache.clear()
            self._cached_from, self._cached_generation = authorizer, number
        key = (principal, host, int(op), int(rtype), name)
        found = cache.get(key)
        if found is None:
            found = bool(authorizer.authorize(principal, host, op, rtype, name))
            if len(cache) >= DECISION_CACHE_MAX:
                cache.clear()
            cache[key] = found
        return found


class Check:
    """One request's questions: may this principal, from this host, do an operation on a resource."""

    __slots__ = ("access", "api", "authorizer", "hidden", "host", "principal")

    def __init__(self, access: Access, principal: str, host: str, api: int) -> None:
        self.access = access
        self.authorizer = access.authorizer
        self.hidden = access.hidden
        known = access.principals.get(principal)
        if known is None:
            known = access.principals[principal] = kafka_principal(principal)
            if len(access.principals) > DECISION_CACHE_MAX:
                access.principals.clear()
        self.principal = known
        self.host = host
        self.api = api

    def allowed(self, op: AclOperation, rtype: ResourceType, name: str, *, audit: bool = True) -> bool:
        authorizer = self.authorizer
        if authorizer is None:
            return True
        ok = self.access.decide(authorizer, self.principal, self.host, op, rtype, name)
        if audit:
            self.access.audit.decision(self.principal, self.host, self.api, rtype, name, op, ok)
        return ok

    def topic(self, op: AclOperation, name: str | None) -> bool:
        """A topic: never one of quotaflow's own, then the authorizer."""
        if name is None:
            return False  # named by id: the gateway cannot tell which topic it is
        if name in self.hidden.names or name.startswith(RESERVED_PREFIX):
            self.access.audit.hidden_topic(self.principal, self.host, self.api, name, op)
            return False
        authorizer = self.authorizer
        if authorizer is None:
            return True
        access = self.access
        ok = access.decide(authorizer, self.principal, self.host, op, RT.TOPIC, name)
        access.audit.decision(self.principal, self.host, self.api, RT.TOPIC, name, op, ok)
        return ok

    def visible(self, name: str | None) -> bool:
        """Whether a listed topic stays in a listing: not hidden, and DESCRIBE allowed (not audited: Kafka filters
        listings without logging each topic)."""
        return name is not None and name not in self.hidden and self.allowed(OP.DESCRIBE, RT.TOPIC, name,
                                                                              audit=False)

    def cluster(self, op: AclOperation) -> bool:
        return self.allowed(op, RT.CLUSTER, CLUSTER_NAME)

    def group(self, op: AclOperation, name: str) -> bool:
        return self.allowed(op, RT.GROUP, name)

    def txn(self, op: AclOperation, name: str) -> bool:
        return self.allowed(op, RT.TRANSACTIONAL_ID, name)

    def operations(self, rtype: ResourceType, name: str, ops: Sequence[AclOperation]) -> set[int]:
        """Kafka's authorized-operations bitfield, as kafka-python holds it: the codes of the allowed operations."""
        return {int(op) for op in ops if self.allowed(op, rtype, name, audit=False)}


Merge = Callable[[Any], None]


@dataclass(slots=True)
class Plan:
    """What to do with one request: ``forward`` (the bytes to send upstream; None: answered here with ``local``, a
    framed response, or b"" when no response is due) and ``merge`` (applied to the decoded upstream response)."""

    forward: bytes | None
    local: bytes | None = None
    merge: Merge | None = None
    merge_if_named: bool = False  # merge only when the response contains a hidden name (a listing filter)


Planner = Callable[[Check, protocol.RequestHeader, bytes], Plan | None]


# -- helpers ---------------------------------------------------------------------------------------------------

def _decode(frame: bytes, header: protocol.RequestHeader) -> Any:
    return protocol.decode_request(frame, header)


def _reencode(request: Any, header: protocol.RequestHeader) -> bytes:
    return protocol.encode_request(request, header)


def _response(header: protocol.RequestHeader, **fields: Any) -> Any:
    """The response as Kafka's error path builds it: ``fields``, the schema's defaults for the rest
    (:mod:`quotaflow.gateway.wire.error_response`)."""
    return error_response.message(header.api_key, header.api_version, **fields)


def _local(header: protocol.RequestHeader, message: Any) -> bytes:
    return protocol.encode_response(message, header.api_version, header.correlation_id)


_entry_class: Final = error_response.element_class
_new: Final = error_response.element  # an element with ``values``, the schema's defaults (Kafka's) for the rest


@dataclass(frozen=True, slots=True)
class TopicShape:
    """Where an API keeps its topics and partitions, in the request and in the response."""

    topics: str
    name: str
    parts: str
    index: str | None  # None: the request's partitions are plain int32s
    r_topics: str
    r_name: str
    r_parts: str
    r_index: str
    r_error: str = "error_code"
    defaults: tuple[tuple[str, Any], ...] = ()  # what Kafka's refusal sets besides the error (never a default)


def _partitions(topic: Any, shape: TopicShape) -> list[int]:
    parts = getattr(topic, shape.parts) or []
    return [int(p) if shape.index is None else int(getattr(p, shape.index)) for p in parts]


def _refused_topic(owner: Any, shape: TopicShape, name: str | None, partitions: Iterable[int], code: int) -> Any:
    tcls = _entry_class(owner, shape.r_topics)
    parts = [_new(tcls, shape.r_parts, **{shape.r_index: p, shape.r_error: code}, **dict(shape.defaults))
             for p in partitions]
    return _new(owner, shape.r_topics, **{shape.r_name: name, shape.r_parts: parts})


def _chain(*merges: Merge | None) -> Merge:
    """Several merges applied in order."""
    steps = [m for m in merges if m is not None]

    def merge(message: Any) -> None:
        for step in steps:
            step(message)
    return merge


def _append(field: str, entries: list[Any]) -> Merge:
    def merge(message: Any) -> None:
        setattr(message, field, [*(getattr(message, field) or []), *entries])
    return merge


def _split_topics(check: Check, header: protocol.RequestHeader, request: Any, shape: TopicShape,
                  refused_code: Callable[[str | None], int], **top: Any) -> Plan | None:
    """Refused topics cut out of the request and answered with their partitions' error; the rest forwarded."""
    kept, refused = [], []
    for topic in getattr(request, shape.topics) or []:
        code = refused_code(getattr(topic, shape.name))
        if code:
            refused.append((getattr(topic, shape.name), _partitions(topic, shape), code))
        else:
            kept.append(topic)
    if not refused:
        return None
    owner = protocol.response_class(header.api_key, header.api_version)
    entries = [_refused_topic(owner, shape, n, ps, c) for n, ps, c in refused]
    if not kept:
        return Plan(None, _local(header, owner(**{shape.r_topics: entries}, **top)))
    setattr(request, shape.topics, kept)
    return Plan(_reencode(request, header), merge=_append(shape.r_topics, entries))


def _all_topics(header: protocol.RequestHeader, request: Any, shape: TopicShape, code: int,
                **top: Any) -> Plan:
    """Every topic of the request answered here with ``code`` (a group / transactional-id refusal)."""
    owner = protocol.response_class(header.api_key, header.api_version)
    entries = [_refused_topic(owner, shape, getattr(t, shape.name), _partitions(t, shape), code)
               for t in getattr(request, shape.topics) or []]
    return Plan(None, _local(header, owner(**{shape.r_topics: entries}, **top)))


def _topic_code(check: Check, op: AclOperation) -> Callable[[str | None], int]:
    return lambda name: NONE if check.topic(op, name) else TOPIC_AUTHORIZATION_FAILED


def _error_only(header: protocol.RequestHeader, code: int, **fields: Any) -> Plan:
    """The whole request refused with one top-level error code."""
    return Plan(None, _local(header, _response(header, error_code=code, **fields)))


def _needs_look(check: Check, frame: bytes) -> bool:
    """Whether a request must be decoded: an authorizer is on, or it may name a hidden topic."""
    return check.authorizer is not None or bool(check.hidden.may_name(frame))


# -- the data path: Produce and Fetch, from their names only ----------------------------------------------------

_PRODUCE: Final = TopicShape("topic_data", "name", "partition_data", "index", "responses", "name",
                             "partition_responses", "index",
                             defaults=(("base_offset", -1), ("log_append_time_ms", -1), ("log_start_offset", -1)))


_SCAN_LIMIT: Final = 1 << 16  # up to this size a substring search is cheaper than walking a Produce's topics


def _produce(check: Check, header: protocol.RequestHeader, frame: bytes) -> Plan | None:
    if check.authorizer is None and len(frame) <= _SCAN_LIMIT and not check.hidden.may_name(frame):
        return None
    transactional_id, names = topic_names.produce_topics(frame, header)
    if transactional_id is not None and check.authorizer is not None \
            and not check.txn(OP.WRITE, transactional_id):
        return _produce_refused(header, frame, TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    for name in names:  # checked again below only on a refusal (rare)
        if not check.topic(OP.WRITE, name):
            break
    else:
        return None
    return _with_acks(header, frame, _split_topics(check, header, _decode(frame, header), _PRODUCE,
                                                  lambda n: NONE if _quiet_topic(check, OP.WRITE, n)
                                                  else TOPIC_AUTHORIZATION_FAILED))


def _quiet_topic(check: Check, op: AclOperation, name: str | None) -> bool:
    """``check.topic`` without a second audit row (the fast pass already recorded the decision)."""
    if name is None or name in check.hidden:
        return False
    return check.allowed(op, RT.TOPIC, name, audit=False)


def _produce_refused(header: protocol.RequestHeader, frame: bytes, code: int) -> Plan:
    plan = _with_acks(header, frame, _all_topics(header, _decode(frame, header), _PRODUCE, code))
    assert plan is not None
    return plan


def _with_acks(header: protocol.RequestHeader, frame: bytes, plan: Plan | None) -> Plan | None:
    """acks=0: no response is due, whatever was refused."""
    if plan is not None and protocol.produce_acks(frame, header) == 0:
        plan.merge = None
        if plan.forward is None:
            plan.local = b""
    return plan


_FETCH: Final = TopicShape("topics", "topic", "partitions", "partition", "responses", "topic", "partitions",
                           "partition_index",
                           defaults=(("high_watermark", -1),))
"""A refused partition as ``FetchResponse.partitionResponse`` makes it: the error and ``high_watermark`` -1; the
schema's defaults for the rest (last stable and log start offsets -1, no aborted transactions, preferred read
replica -1) and empty records, as Kafka writes them (librdkafka cannot parse null records)."""


def _fetch(check: Check, header: protocol.RequestHeader, frame: bytes) -> Plan | None:
    if check.authorizer is None and not check.hidden.may_name(frame):
        return None  # a Fetch request is small: one substring search
    body = protocol.body_offset(frame, header)
    names = topic_names.fetch_topics(frame, header, body)
    original = frame
    if check.authorizer is not None:
        # sessions off: a session's partitions are not named again, so they could not be re-authorized
        frame = topic_names.sessionless_fetch(frame, header, body)
        replica_id = protocol.SIZE.unpack_from(frame, body)[0]
        if replica_id >= 0 and not check.cluster(OP.CLUSTER_ACTION):  # a follower's fetch
            return _all_topics(header, _decode(frame, header), _FETCH, CLUSTER_AUTHORIZATION_FAILED,
                               error_code=0, session_id=0)
    for name in names:
        if not check.topic(OP.READ, name):
            break
    else:
        return Plan(frame) if frame is not original else None
    return _split_topics(check, header, _decode(frame, header), _FETCH,
                         lambda n: NONE if _quiet_topic(check, OP.READ, n) else TOPIC_AUTHORIZATION_FAILED,
                         error_code=0, session_id=0)


# -- topics by partition -----------------------------------------------------------------------------------------

_LIST_OFFSETS: Final = TopicShape("topics", "name", "partitions", "partition_index", "topics", "name", "partitions",
                                  "partition_index", defaults=(("timestamp", -1), ("offset", -1),
                                                               ("old_style_offsets", [])))
_EPOCHS: Final = TopicShape("topics", "topic", "partitions", "partition", "topics", "topic", "partitions",
                            "partition", defaults=(("leader_epoch", -1), ("end_offset", -1)))
_DELETE_RECORDS: Final = TopicShape("topics", "name", "partitions", "partition_index", "topics", "name",
                                    "partitions", "partition_index", defaults=(("low_watermark", -1),))
_PRODUCERS: Final = TopicShape("topics", "name", "partition_indexes", None, "topics", "name", "partitions",
                               "partition_index")
_OFFSET_COMMIT: Final = TopicShape("topics", "name", "partitions", "partition_index", "topics", "name",
                                   "partitions", "partition_index")
_OFFSET_DELETE: Final = _OFFSET_COMMIT


def _by_topic(shape: TopicShape, op: AclOperation) -> Planner:
    def planner(check: Check, header: protocol.RequestHeader, frame: bytes) -> Plan | None:
        if not _needs_look(check, frame):
            return None
        return _split_topics(check, header, _decode(frame, header), shape, _topic_code(check, op))
    return planner


def _offset_commit(check: Check, header: protocol.RequestHeader, frame: bytes) -> Plan | None:
    """OffsetCommit: READ on the group (30 for every partition), then READ per topic; TxnOffsetCommit first needs
    WRITE on its transactional id (53 for every partition)."""
    if not _needs_look(check, frame):
        return None
    request = _decode(frame, header)
    if header.api_key == ApiKey.TxnOffsetCommit and not check.txn(OP.WRITE, request.transactional_id):
        return _all_topics(header, request, _OFFSET_COMMIT, TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not check.group(OP.READ, request.group_id):
        return _all_topics(header, request, _OFFSET_COMMIT, GROUP_AUTHORIZATION_FAILED)
    return _split_topics(check, header, request, _OFFSET_COMMIT, _topic_code(check, OP.READ))


def _offset_delete(check: Check, header: protocol.RequestHeader, frame: bytes) -> Plan | None:
    if not _needs_look(check, frame):
        return None
    request = _decode(frame, header)
    if not check.group(OP.DELETE, request.group_id):
        return _error_only(header, GROUP_AUTHORIZATION_FAILED, topics=[])
    return _split_topics(check, header, request, _OFFSET_DELETE, _topic_code(check, OP.READ), error_code=0)


_TXN_TOPICS: Final = TopicShape("v3_and_below_topics", "name", "partitions", None, "results_by_topic_v3_and_below",
                                "name", "results_by_partition", "partition_index", r_error="partition_error_code")


def _add_partitions_to_txn(check: Check, header: protocol.RequestHeader, frame: bytes) -> Plan | None:
    """v0–3 (a client's): WRITE on the transactional id (53 for all), then WRITE on each topic; one refused topic
    fails the whole request (29 for it, OPERATION_NOT_ATTEMPTED for the rest), as Kafka does."""
    if not _needs_look(check, frame):
        return None
    request = _decode(frame, header)
    topics = request.v3_and_below_topics or []
    if not check.txn(OP.WRITE, request.v3_and_below_transactional_id):
        return _all_topics(header, request, _TXN_TOPICS, TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    refused = {t.name for t in topics if not check.topic(OP.WRITE, t.name)}
    if not refused:
        return None
    owner = protocol.response_class(header.api_key, header.api_version)
    entries = [_refused_topic(owner, _TXN_TOPICS, t.name, [int(p) for p in t.partitions or []],
                              TOPIC_AUTHORIZATION_FAILED if t.name in refused else OPERATION_NOT_ATTEMPTED)
               for t in topics]
    return Plan(None, _local(header, owner(results_by_topic_v3_and_below=entries)))


# -- topics as a whole ---------------------------------------------------------------------------------------------

def _topic_results(req_field: str, resp_field: str, op: AclOperation, *, cluster_op: AclOperation | None = None,
                   **defaults: Any) -> Planner:
    """APIs with one result per named topic (CreateTopics, DeleteTopics v0–5, CreatePartitions)."""
    def planner(check: Check, header: protocol.RequestHeader, frame: bytes) -> Plan | None:
        if not _needs_look(check, frame):
            return None
        request = _decode(frame, header)
        items = getattr(request, req_field) or []
        plain = items and isinstance(items[0], str)
        whole = cluster_op is not None and check.authorizer is not None and check.cluster(cluster_op)
        kept: list[Any] = []
        refused: list[Any] = []
        for item in items:
            name = item if plain else item.name
            ok = (name not in check.hidden) if whole else check.topic(op, name)
            if whole and not ok:
                check.topic(op, name)  # audit the hidden-topic refusal
            (kept if ok else refused).append(item)
        if not refused:
            return None
        owner = protocol.response_class(header.api_key, header.api_version)
        entries = [_new(owner, resp_field, name=(r if plain else r.name), error_code=TOPIC_AUTHORIZATION_FAILED,
                        **defaults) for r in refused]
        if not kept:
            return Plan(None, _local(header, owner(**{resp_field: entries})))
        setattr(request, req_field, kept)
        return Plan(_reencode(request, header), merge=_append(resp_field, entries))
    return planner


def _create_topics_merge(check: Check) -> Merge:
    """Created topics whose configs the principal may not describe get TOPIC_AUTHORIZATION_FAILED in
    ``topic_config_error_code`` and no configs (KafkaApis)."""
    def merge(message: Any) -> None:
        for topic in message.topics or []:
            if topic.error_code == NONE and not check.allowed(OP.DESCRIBE_CONFIGS, RT.TOPIC, topic.name,
                                                             audit=False):
                if "topic_config_error_code" in topic._struct.fields:
                    topic.topic_config_error_code = TOPIC_AUTHORIZATION_FAILED
                topic.configs = []
                topic.num_partitions, topic.replication_factor = -1, -1
    return merge


_CREATE_TOPICS_PLANNER: Final = _topic_results("topics", "topics", OP.CREATE, cluster_op=OP.CREATE,
                                               error_message="Authorization failed.")
"""A refused topic as KRaft's controller answers it (ControllerApis): the error, "Authorization failed.", the
schema's defaults for the rest (-1 partitions and replication factor, no configs)."""


def _create_topics(check: Check, header: protocol.RequestHeader, frame: bytes) -> Plan | None:
    plan = _CREATE_TOPICS_PLANNER(check, header, frame)
    if check.authorizer is None or header.api_version < 5:
        return plan
    if plan is None:
        return Plan(frame, merge=_create_topics_merge(check))
    if plan.merge is not None:
        plan.merge = _chain(_create_topics_merge(check), plan.merge)
    return plan


# -- Metadata and topic listings -------------------------------------------------------------------------------

def _metadata(check: Check, header: protocol.RequestHeader, frame: bytes) -> Plan:
    """DESCRIBE per topic: all-topics answers leave out what may not be described, named topics come back with 29;
    auto-creation needs CREATE on the cluster or the topic. Always merged (the response is decoded anyway to
    rewrite broker addresses)."""
    request = _decode(frame, header)
    version = header.api_version
    all_topics = request.topics is None or (version == 0 and not request.topics)
    refused: list[Any] = []
    no_create: set[str] = set()
    changed = False
    if not all_topics:
        kept = []
        for t in request.topics:
            if check.topic(OP.DESCRIBE, t.name):
                kept.append(t)
            else:
                refused.append(t)
        if refused:
            request.topics, changed = kept, True
        if check.authorizer is not None and version >= 4 and request.allow_auto_topic_creation \
                and not check.allowed(OP.CREATE, RT.CLUSTER, CLUSTER_NAME, audit=False):
            no_create = {t.name for t in kept if not check.allowed(OP.CREATE, RT.TOPIC, t.name, audit=False)}
            if no_create:
                request.allow_auto_topic_creation, changed = False, True
    asked = set() if all_topics else {t.name for t in request.topics if t.name is not None}
    owner = protocol.response_class(ApiKey.Metadata, version)
    want_topic_ops = bool(getattr(request, "include_topic_authorized_operations", False)) and version >= 8
    want_cluster_ops = bool(getattr(request, "include_cluster_authorized_operations", False)) and 8 <= version <= 10

    def merge(message: Any) -> None:
        topics = []
        for t in message.topics or []:
            if t.name is not None and t.name in check.hidden:
                continue  # quotaflow's own topics: never listed, whatever was asked
            if not check.visible(t.name) if all_topics else t.name not in asked:
                continue  # nor what an upstream lists unasked (tansu answers an empty list with every topic)
            if t.name in no_create and t.error_code == UNKNOWN_TOPIC_OR_PARTITION:
                t.error_code, t.partitions = TOPIC_AUTHORIZATION_FAILED, []
            if want_topic_ops and check.authorizer is not None and t.name is not None:
                t.authorized_operations = check.operations(RT.TOPIC, t.name, TOPIC_OPERATIONS)
            topics.append(t)
        for t in refused:
            topics.append(_new(owner, "topics", name=t.name if t.name is not None or version >= 12 else "",
                               topic_id=t.topic_id,
                               error_code=TOPIC_AUTHORIZATION_FAILED, is_internal=False, partitions=[],
                               authorized_operations=NO_OPERATIONS))
        message.topics = topics
        if want_cluster_ops and check.authorizer is not None:
            message.authorized_operations = check.operations(RT.CLUSTER, CLUSTER_NAME, CLUSTER_OPERATIONS)

    return Plan(_reencode(request, header) if changed else frame, merge=merge)


def _describe_topic_partitions(check: Check, header: protocol.RequestHeader, frame: bytes) -> Plan | None:
    request = _decode(frame, header)
    refused = [t.name for t in request.topics or [] if not check.topic(OP.DESCRIBE, t.name)]
    if refused:
        request.topics = [t for t in request.topics if t.name not in refused]
    owner = protocol.response_class(header.api_key, header.api_version)
    entries = [_new(owner, "topics", name=n, error_code=TOPIC_AUTHORIZATION_FAILED, is_internal=False,
                    partitions=[], topic_authorized_operations=-(1 << 31)) for n in refused]  # an int32 here
    listing = not request.topics and not refused

    def merge(message: Any) -> None:
        message.topics = [t for t in message.topics or []
                          if t.name not in check.hidden and (not listing or check.visible(t.name))] + entries

    if refused and not request.topics:
        return Plan(None, _local(header, owner(topics=entries, next_cursor=None)))
    return Plan(_reencode(request, header) if refused else frame, merge=merge,
                merge_if_named=check.authorizer is None and not refused)


def _offset_fetch(check: Check, header: protocol.RequestHeader, frame: bytes) -> Plan | None:
    """DESCRIBE on the group (30), then DESCRIBE per topic: named ones 29 per partition, all-partitions answers
    leave them out. v8–9 batch groups: refused groups answered here, the rest forwarded."""
    if not _needs_look(check, frame):
        return Plan(frame, merge=_offset_fetch_filter(check, header.api_version), merge_if_named=True)
    request = _decode(frame, header)
    if header.api_version < 8:
        if not check.group(OP.DESCRIBE, request.group_id):
            if header.api_version >= 2:
                return _error_only(header, GROUP_AUTHORIZATION_FAILED, topics=[])
            return _all_topics(header, request, _OFFSET_FETCH_V0, GROUP_AUTHORIZATION_FAILED)
        plan = _split_topics(check, header, request, _OFFSET_FETCH_V0, _topic_code(check, OP.DESCRIBE),
                             error_code=0)
        return _then_filter(plan, frame, _offset_fetch_filter(check, header.api_version))
    owner = protocol.response_class(header.api_key, header.api_version)
    kept_groups, refused_groups = [], []
    refused_topics: dict[str, list[Any]] = {}
    for group in request.groups or []:
        if not check.group(OP.DESCRIBE, group.group_id):
            refused_groups.append(_new(owner, "groups", group_id=group.group_id, topics=[],
                                       error_code=GROUP_AUTHORIZATION_FAILED))
            continue
        kept_groups.append(group)
        if group.topics is None:
            continue
        gcls = _entry_class(owner, "groups")
        kept: list[Any] = []
        gone: list[Any] = []
        for t in group.topics:
            (kept if check.topic(OP.DESCRIBE, t.name) else gone).append(t)
        if gone:
            group.topics = kept
            refused_topics[group.group_id] = [
                _new(gcls, "topics", name=t.name, partitions=[
                    _new(_entry_class(gcls, "topics"), "partitions", partition_index=int(p), committed_offset=-1,
                         committed_leader_epoch=-1, metadata="", error_code=TOPIC_AUTHORIZATION_FAILED)
                    for p in t.partition_indexes or []]) for t in gone]
    listing = _offset_fetch_filter(check, header.api_version)

    def merge(message: Any) -> None:
        listing(message)
        for group in message.groups or []:
            group.topics = [*(group.topics or []), *refused_topics.get(group.group_id, [])]
        message.groups = [*(message.groups or []), *refused_groups]

    if not kept_groups:
        return Plan(None, _local(header, owner(groups=refused_groups)))
    changed = bool(refused_groups or refused_topics)
    if changed:
        request.groups = kept_groups
    return Plan(_reencode(request, header) if changed else frame, merge=merge)


_OFFSET_FETCH_V0: Final = TopicShape("topics", "name", "partition_indexes", None, "topics", "name", "partitions",
                                     "partition_index", defaults=(("committed_offset", -1),
                                                                  ("committed_leader_epoch", -1), ("metadata", "")))


def _offset_fetch_filter(check: Check, version: int) -> Merge:
    """Committed offsets of topics the principal may not describe (or quotaflow's own) are left out."""
    def merge(message: Any) -> None:
        if version < 8:
            message.topics = [t for t in message.topics or [] if check.visible(t.name)
                              or any(p.error_code == TOPIC_AUTHORIZATION_FAILED for p in t.partitions or [])]
            return
        for group in message.groups or []:
            group.topics = [t for t in group.topics or [] if check.visible(t.name)]
    return merge


def _then_filter(plan: Plan | None, frame: bytes, listing: Merge) -> Plan:
    if plan is None:
        return Plan(frame, merge=listing)
    if plan.merge is not None:
        plan.merge = _chain(listing, plan.merge)
    return plan


# -- cluster-level and admin APIs --------------------------------------------------------------------------------

def _cluster_only(op: AclOperation, refuse: Callable[[protocol.RequestHeader, Any], Any] | None = None) -> Planner:
    """APIs that need one operation on the cluster (31 otherwise)."""
    def planner(check: Check, header: protocol.RequestHeader, frame: bytes) -> Plan | None:
        if check.authorizer is None or check.cluster(op):
            return None
        if refuse is None:
            return _error_only(header, CLUSTER_AUTHORIZATION_FAILED)
        return Plan(None, _local(header, refuse(header, _decode(frame, header))))
    return planner


def _describe_cluster(check: Check, header: protocol.RequestHeader, frame: bytes) -> Plan | None:
    if check.authorizer is None:
        return None
    request = _decode(frame, header)
    if not request.include_cluster_authorized_operations:
        return None

    def merge(message: Any) -> None:
        message.authorized_operations = check.operations(RT.CLUSTER, CLUSTER_NAME, CLUSTER_OPERATIONS)
    return Plan(frame, merge=merge)


def _hidden_listing(strip: Callable[[Check, Any], None]) -> Callable[[Planner | None], Planner]:
    """Wrap a planner so the response drops quotaflow's topics from its listing."""
    def wrap(inner: Planner | None) -> Planner:
        def planner(check: Check, header: protocol.RequestHeader, frame: bytes) -> Plan | None:
            plan = inner(check, header, frame) if inner is not None else None
            def merge(message: Any) -> None:
                strip(check, message)
            if plan is None:
                return Plan(frame, merge=merge, merge_if_named=True)
            if plan.forward is not None:
                plan.merge = _chain(merge, plan.merge)
            return plan
        return planner
    return wrap


def _strip_log_dirs(check: Check, message: Any) -> None:
    for result in message.results or []:
        result.topics = [t for t in result.topics or [] if t.name not in check.hidden]


def _strip_reassignments(check: Check, message: Any) -> None:
    message.topics = [t for t in message.topics or [] if t.name not in check.hidden]


def _strip_transactions(check: Check, message: Any) -> None:
    for state in message.transaction_states or []:
        state.topics = [t for t in state.topics or [] if check.visible(t.topic)]


def _describe_log_dirs_refused(header: protocol.RequestHeader, _request: Any) -> Any:
    if header.api_version >= 3:
        return _response(header, error_code=CLUSTER_AUTHORIZATION_FAILED, results=[])
    return _response(header, results=[])


def _partitions_by_topic(shape: TopicShape, op: AclOperation, *, top_error: bool) -> Planner:
    """ElectLeaders / AlterPartitionReassignments: ALTER on the cluster for the whole request (31 at the top and
    per partition), quotaflow's topics refused per partition with 29."""
    def planner(check: Check, header: protocol.RequestHeader, frame: bytes) -> Plan | None:
        if not _needs_look(check, frame):
            return None
        request = _decode(frame, header)
        if not check.cluster(op):
            extra = {"error_code": CLUSTER_AUTHORIZATION_FAILED} if top_error and \
                "error_code" in protocol.response_class(header.api_key, header.api_version)._struct.fields else {}
            return _all_topics(header, request, shape, CLUSTER_AUTHORIZATION_FAILED, **extra)
        if getattr(request, shape.topics) is None:
            return None
        return _split_topics(check, header, request, shape, lambda n: NONE if n not in check.hidden
                             else TOPIC_AUTHORIZATION_FAILED)
    return planner


_ELECT: Final = TopicShape("topic_partitions", "topic", "partitions", None, "replica_election_results", "topic",
                           "partition_result", "partition_id", defaults=(("error_message", None),))
_REASSIGN: Final = TopicShape("topics", "name", "partitions", "partition_index", "responses", "name", "partitions",
                              "partition_index", defaults=(("error_message", None),))


def _list_reassignments(check: Check, header: protocol.RequestHeader, frame: bytes) -> Plan | None:
    if check.authorizer is not None and not check.cluster(OP.DESCRIBE):
        # getErrorResponse: the topics and partitions asked about echoed (none for a listing of all)
        asked = _decode(frame, header).topics or []
        owner = protocol.response_class(header.api_key, header.api_version)
        tcls = _entry_class(owner, "topics")
        topics = [_new(owner, "topics", name=t.name, partitions=[_new(tcls, "partitions", partition_index=int(p))
                                                                 for p in t.partition_indexes or []])
                  for t in asked]
        return _error_only(header, CLUSTER_AUTHORIZATION_FAILED, error_message=None, topics=topics)
    if not check.hidden.may_name(frame):
        return None
    request = _decode(frame, header)
    if request.topics is not None:
        request.topics = [t for t in request.topics if t.name not in check.hidden]
    return Plan(_reencode(request, header))


# -- configs ---------------------------------------------------------------------------------------------------

def _configs(op: AclOperation, resp_field: str, **defaults: Any) -> Planner:
    """Describe/Alter/IncrementalAlterConfigs: per resource, DESCRIBE_CONFIGS / ALTER_CONFIGS on the topic (29),
    the cluster for broker and broker-logger and client-metrics resources (31), the group (30)."""
    def code(check: Check, rtype: int, name: str) -> int:
        if rtype == _CONFIG_TOPIC:
            return NONE if check.topic(op, name) else TOPIC_AUTHORIZATION_FAILED
        if check.authorizer is None:
            return NONE
        if rtype in (_CONFIG_BROKER, _CONFIG_BROKER_LOGGER, _CONFIG_CLIENT_METRICS):
            return NONE if check.cluster(op) else CLUSTER_AUTHORIZATION_FAILED
        if rtype == _CONFIG_GROUP:
            return NONE if check.group(op, name) else GROUP_AUTHORIZATION_FAILED
        return CLUSTER_AUTHORIZATION_FAILED  # a resource type the gateway cannot authorize exactly

    def planner(check: Check, header: protocol.RequestHeader, frame: bytes) -> Plan | None:
        if not _needs_look(check, frame):
            return None
        request = _decode(frame, header)
        kept, refused = [], []
        for r in request.resources or []:
            c = code(check, int(r.resource_type), r.resource_name)
            if c:
                refused.append((r, c))
            else:
                kept.append(r)
        if not refused:
            return None
        owner = protocol.response_class(header.api_key, header.api_version)
        entries = [_new(owner, resp_field, error_code=c, error_message=None, resource_type=r.resource_type,
                        resource_name=r.resource_name, **defaults) for r, c in refused]
        if not kept:
            return Plan(None, _local(header, owner(**{resp_field: entries})))
        request.resources = kept
        return Plan(_reencode(request, header), merge=_append(resp_field, entries))
    return planner


# -- groups and transactions ------------------------------------------------------------------------------------

def _group_api(op: AclOperation, refused: Callable[[int], dict[str, Any]] | None = None) -> Planner:
    """JoinGroup, SyncGroup, Heartbeat, LeaveGroup: one group, READ (30 for the request, with what the request's
    ``getErrorResponse`` sets at this version)."""
    def planner(check: Check, header: protocol.RequestHeader, frame: bytes) -> Plan | None:
        if check.authorizer is None:
            return None
        request = _decode(frame, header)
        if check.group(op, request.group_id):
            return None
        fields = refused(header.api_version) if refused is not None else {}
        return _error_only(header, GROUP_AUTHORIZATION_FAILED, **fields)
    return planner


def _find_coordinator(check: Check, header: protocol.RequestHeader, frame: bytes) -> Plan | None:
    if check.authorizer is None:
        return None
    request = _decode(frame, header)
    key_type = int(getattr(request, "key_type", 0))

    def code(key: str) -> int:
        if key_type == 0:
            return NONE if check.group(OP.DESCRIBE, key) else GROUP_AUTHORIZATION_FAILED
        if key_type == 1:
            return NONE if check.txn(OP.DESCRIBE, key) else TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        return CLUSTER_AUTHORIZATION_FAILED  # share groups: not authorized by the gateway

    if header.api_version < 4:
        c = code(request.key)
        if not c:
            return None  # KafkaApis: the error's generic message (Errors.message()) and Node.noNode()
        return _error_only(header, c, error_message=_GENERIC[c], node_id=-1, host="", port=-1)
    owner = protocol.response_class(header.api_key, header.api_version)
    kept, refused = [], []
    for key in request.coordinator_keys or []:
        c = code(key)
        if c:
            refused.append(_new(owner, "coordinators", key=key, node_id=-1, host="", port=-1, error_code=c))
        else:
            kept.append(key)
    if not refused:
        return None
    if not kept:
        return Plan(None, _local(header, owner(coordinators=refused)))
    request.coordinator_keys = kept
    return Plan(_reencode(request, header), merge=_append("coordinators", refused))


def _describe_groups(check: Check, header: protocol.RequestHeader, frame: bytes) -> Plan | None:
    if check.authorizer is None:
        return None
    request = _decode(frame, header)
    owner = protocol.response_class(header.api_key, header.api_version)
    kept = [g for g in request.groups or [] if check.group(OP.DESCRIBE, g)]
    refused = [_new(owner, "groups", error_code=GROUP_AUTHORIZATION_FAILED, error_message=None, group_id=g,
                    group_state="", protocol_type="", protocol_data="", members=[],
                    authorized_operations=NO_OPERATIONS) for g in request.groups or [] if g not in kept]
    want_ops = header.api_version >= 3 and bool(request.include_authorized_operations)

    def merge(message: Any) -> None:
        if want_ops:
            for g in message.groups or []:
                if g.error_code == NONE:
                    g.authorized_operations = check.operations(RT.GROUP, g.group_id, GROUP_OPERATIONS)
        message.groups = [*(message.groups or []), *refused]

    if not kept:
        return Plan(None, _local(header, owner(groups=refused)))
    if refused:
        request.groups = kept
        return Plan(_reencode(request, header), merge=merge)
    return Plan(frame, merge=merge) if want_ops else None


def _list_groups(check: Check, header: protocol.RequestHeader, frame: bytes) -> Plan | None:
    if check.authorizer is None or check.cluster(OP.DESCRIBE):
        return None

    def merge(message: Any) -> None:
        message.groups = [g for g in message.groups or []
                          if check.allowed(OP.DESCRIBE, RT.GROUP, g.group_id, audit=False)]
    return Plan(frame, merge=merge)


def _delete_groups(check: Check, header: protocol.RequestHeader, frame: bytes) -> Plan | None:
    if check.authorizer is None:
        return None
    request = _decode(frame, header)
    owner = protocol.response_class(header.api_key, header.api_version)
    names = request.groups_names or []
    kept = [g for g in names if check.group(OP.DELETE, g)]
    refused = [_new(owner, "results", group_id=g, error_code=GROUP_AUTHORIZATION_FAILED)
               for g in names if g not in kept]
    if not refused:
        return None
    if not kept:
        return Plan(None, _local(header, owner(results=refused)))
    request.groups_names = kept
    return Plan(_reencode(request, header), merge=_append("results", refused))


def _init_producer_id(check: Check, header: protocol.RequestHeader, frame: bytes) -> Plan | None:
    if check.authorizer is None:
        return None
    request = _decode(frame, header)
    if request.transactional_id is not None:
        if check.txn(OP.WRITE, request.transactional_id):
            return None
        code = TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    else:
        authorizer = check.authorizer
        if check.cluster(OP.IDEMPOTENT_WRITE) or authorizer.authorize_by_resource_type(
                check.principal, check.host, OP.WRITE, RT.TOPIC):
            return None
        code = CLUSTER_AUTHORIZATION_FAILED
    return _error_only(header, code, producer_id=-1, producer_epoch=-1)


def _add_offsets_to_txn(check: Check, header: protocol.RequestHeader, frame: bytes) -> Plan | None:
    if check.authorizer is None:
        return None
    request = _decode(frame, header)
    if not check.txn(OP.WRITE, request.transactional_id):
        return _error_only(header, TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not check.group(OP.READ, request.group_id):
        return _error_only(header, GROUP_AUTHORIZATION_FAILED)
    return None


def _end_txn(check: Check, header: protocol.RequestHeader, frame: bytes) -> Plan | None:
    if check.authorizer is None:
        return None
    request = _decode(frame, header)
    if check.txn(OP.WRITE, request.transactional_id):
        return None
    return _error_only(header, TRANSACTIONAL_ID_AUTHORIZATION_FAILED)


def _describe_transactions(check: Check, header: protocol.RequestHeader, frame: bytes) -> Plan | None:
    request = _decode(frame, header)
    owner = protocol.response_class(header.api_key, header.api_version)
    ids = request.transactional_ids or []
    kept = [i for i in ids if check.txn(OP.DESCRIBE, i)]
    refused = [_new(owner, "transaction_states", error_code=TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                    transactional_id=i) for i in ids if i not in kept]  # KafkaApis sets these two only

    def merge(message: Any) -> None:
        _strip_transactions(check, message)
        message.transaction_states = [*(message.transaction_states or []), *refused]

    if not kept and refused:
        return Plan(None, _local(header, owner(transaction_states=refused)))
    if refused:
        request.transactional_ids = kept
        return Plan(_reencode(request, header), merge=merge)
    return Plan(frame, merge=merge, merge_if_named=check.authorizer is None)


def _list_transactions(check: Check, header: protocol.RequestHeader, frame: bytes) -> Plan | None:
    if check.authorizer is None:
        return None

    def merge(message: Any) -> None:
        message.transaction_states = [s for s in message.transaction_states or []
                                      if check.allowed(OP.DESCRIBE, RT.TRANSACTIONAL_ID, s.transactional_id,
                                                       audit=False)]
    return Plan(frame, merge=merge)


def _update_features_refused(header: protocol.RequestHeader, _request: Any) -> Any:
    """UpdateFeaturesResponse.createWithErrors with a top-level error: no per-feature results, at any version."""
    return _response(header, error_code=CLUSTER_AUTHORIZATION_FAILED, error_message=None, results=[])


_ACL_NAMED: Final[Mapping[int, tuple[str | None, str, str, AclOperation]]] = {
    # API -> (its array of patterns or filters, None: the request is the one filter; the resource type and name
    # fields; the cluster operation Kafka's AclApis checks)
    ApiKey.DescribeAcls: (None, "resource_type_filter", "resource_name_filter", OP.DESCRIBE),
    ApiKey.CreateAcls: ("creations", "resource_type", "resource_name", OP.ALTER),
    ApiKey.DeleteAcls: ("filters", "resource_type_filter", "resource_name_filter", OP.ALTER),
}
_ACL_TOPIC_TYPES: Final = frozenset({int(RT.ANY), int(RT.TOPIC)})


def _acl_resources(check: Check, header: protocol.RequestHeader, frame: bytes) -> Plan | None:
    """DescribeAcls, CreateAcls, DeleteAcls, forwarded in SASL passthrough only (otherwise the gateway answers them
    from its store, ``gateway.auth.acl_admin``): the cluster decides them, except that an ACL binding or filter
    naming one of quotaflow's topics (a topic or ANY resource whose name is hidden) never reaches it, as no other
    request naming them does: who may read or write quotaflow's topics on the cluster is not a tenant's to see or
    change through the gateway. Such a request is refused whole with CLUSTER_AUTHORIZATION_FAILED, as Kafka's
    ``AclApis`` refuses an ACL request whose cluster operation is not allowed (one error for every entry, message
    null). Wildcards and prefixes that merely cover quotaflow's topics among others stay the cluster's to decide."""
    if not check.hidden.may_name(frame):
        return None
    array, type_field, name_field, op = _ACL_NAMED[header.api_key]
    request = _decode(frame, header)
    entries = [request] if array is None else list(getattr(request, array) or [])
    named = [str(getattr(e, name_field)) for e in entries
             if int(getattr(e, type_field)) in _ACL_TOPIC_TYPES and getattr(e, name_field) in check.hidden]
    if not named:
        return None
    for name in named:
        check.access.audit.hidden_topic(check.principal, check.host, check.api, name, op)
    code = CLUSTER_AUTHORIZATION_FAILED
    if array is None:
        return _error_only(header, code, error_message=None, resources=[])
    owner = protocol.response_class(header.api_key, header.api_version)
    field = "results" if header.api_key == ApiKey.CreateAcls else "filter_results"
    results = [_new(owner, field, error_code=code, error_message=None, matching_acls=[]) for _ in entries]
    return Plan(None, _local(header, _response(header, **{field: results})))


TOPIC_MUTATIONS: Final[dict[int, AclOperation]] = {ApiKey.DeleteTopics: OP.DELETE, ApiKey.CreatePartitions: OP.ALTER}
"""What DeleteTopics and CreatePartitions need on each topic they name."""


def nameable_topics(access: Access, principal: str, host: str, api: int, names: Iterable[str]) -> list[str]:
    """Of the topics a DeleteTopics / CreatePartitions names, those its principal may act on (never quotaflow's own):
    the only ones whose partition counts the gateway may look up upstream for KIP-599 (with its own rights) before
    the request hook authorizes the request. Decided quietly: the request hook records the decisions, once."""
    check = Check(access, principal, host, api)
    op = TOPIC_MUTATIONS[api]
    return [n for n in names if _quiet_topic(check, op, n)]


def _join_group_refused(version: int) -> dict[str, Any]:
    """JoinGroupRequest.getErrorResponse: no generation, member or leader; the protocol name null from v7 (where it
    became nullable), empty before."""
    return {"generation_id": -1, "member_id": "", "leader": "", "members": [],
            "protocol_name": None if version >= 7 else ""}


def _sync_group_refused(_version: int) -> dict[str, Any]:
    """SyncGroupRequest.getErrorResponse: an empty assignment (protocol type and name keep their null default)."""
    return {"assignment": b""}


_NO_ID: Final = uuid.UUID(int=0)


def _names_only(inner: Planner) -> Planner:
    """Metadata v10+: an entry that carries a topic id is authorized as an entry without a name (refused, 29): the
    gateway authorizes topics by name and does not offer topic ids (a name beside the id of another topic, which
    the broker might resolve by id, is refused as well)."""
    def planner(check: Check, header: protocol.RequestHeader, frame: bytes) -> Plan | None:
        if header.api_version < 10:
            return inner(check, header, frame)
        request = _decode(frame, header)
        by_id = [t for t in request.topics or [] if t.topic_id is not None and t.topic_id != _NO_ID]
        if not by_id:
            return inner(check, header, frame)
        for t in by_id:
            t.name = None
        return inner(check, header, _reencode(request, header))
    return planner


def _follower_epochs(inner: Planner) -> Planner:
    """OffsetForLeaderEpoch v3+: a ``replica_id`` of a broker (>= 0) is a follower's request, which Kafka allows
    only with CLUSTER_ACTION (31 for every partition); a consumer's (-1 / -2) is authorized per topic."""
    def planner(check: Check, header: protocol.RequestHeader, frame: bytes) -> Plan | None:
        if header.api_version >= 3 and check.authorizer is not None:
            request = _decode(frame, header)
            if int(request.replica_id) >= 0 and not check.cluster(OP.CLUSTER_ACTION):
                return _all_topics(header, request, _EPOCHS, CLUSTER_AUTHORIZATION_FAILED)
        return inner(check, header, frame)
    return planner


PLANNERS: Final[dict[int, Planner]] = {
    ApiKey.Produce: _produce,
    ApiKey.Fetch: _fetch,
    ApiKey.ListOffsets: _by_topic(_LIST_OFFSETS, OP.DESCRIBE),
    ApiKey.Metadata: _names_only(_metadata),
    ApiKey.OffsetCommit: _offset_commit,
    ApiKey.OffsetFetch: _offset_fetch,
    ApiKey.FindCoordinator: _find_coordinator,
    ApiKey.JoinGroup: _group_api(OP.READ, _join_group_refused),
    ApiKey.Heartbeat: _group_api(OP.READ),
    ApiKey.LeaveGroup: _group_api(OP.READ),
    ApiKey.SyncGroup: _group_api(OP.READ, _sync_group_refused),
    ApiKey.DescribeGroups: _describe_groups,
    ApiKey.ListGroups: _list_groups,
    ApiKey.CreateTopics: _create_topics,
    ApiKey.DeleteTopics: _topic_results("topic_names", "responses", TOPIC_MUTATIONS[ApiKey.DeleteTopics]),
    ApiKey.DeleteRecords: _by_topic(_DELETE_RECORDS, OP.DELETE),
    ApiKey.InitProducerId: _init_producer_id,
    ApiKey.OffsetForLeaderEpoch: _follower_epochs(_by_topic(_EPOCHS, OP.DESCRIBE)),
    ApiKey.AddPartitionsToTxn: _add_partitions_to_txn,
    ApiKey.AddOffsetsToTxn: _add_offsets_to_txn,
    ApiKey.EndTxn: _end_txn,
    ApiKey.TxnOffsetCommit: _offset_commit,
    # the ACL APIs: answered by the gateway in terminate mode (gateway.auth.acl_admin), the cluster's in passthrough
    ApiKey.DescribeAcls: _acl_resources,
    ApiKey.CreateAcls: _acl_resources,
    ApiKey.DeleteAcls: _acl_resources,
    ApiKey.DescribeConfigs: _configs(OP.DESCRIBE_CONFIGS, "results", configs=[]),
    ApiKey.AlterConfigs: _configs(OP.ALTER_CONFIGS, "responses"),
    ApiKey.IncrementalAlterConfigs: _configs(OP.ALTER_CONFIGS, "responses"),
    ApiKey.DescribeLogDirs: _hidden_listing(_strip_log_dirs)(_cluster_only(OP.DESCRIBE, _describe_log_dirs_refused)),
    ApiKey.CreatePartitions: _topic_results("topics", "results", TOPIC_MUTATIONS[ApiKey.CreatePartitions]),
    ApiKey.DeleteGroups: _delete_groups,
    ApiKey.ElectLeaders: _partitions_by_topic(_ELECT, OP.ALTER, top_error=True),
    ApiKey.AlterPartitionReassignments: _partitions_by_topic(_REASSIGN, OP.ALTER, top_error=True),
    ApiKey.ListPartitionReassignments: _hidden_listing(_strip_reassignments)(_list_reassignments),
    ApiKey.OffsetDelete: _offset_delete,
    ApiKey.DescribeQuorum: _cluster_only(OP.DESCRIBE),
    ApiKey.UpdateFeatures: _cluster_only(OP.ALTER, _update_features_refused),
    ApiKey.DescribeCluster: _describe_cluster,
    ApiKey.DescribeProducers: _by_topic(_PRODUCERS, OP.READ),
    ApiKey.DescribeTransactions: _describe_transactions,
    ApiKey.ListTransactions: _list_transactions,
    ApiKey.ListConfigResources: _cluster_only(OP.DESCRIBE_CONFIGS),
    ApiKey.DescribeTopicPartitions: _describe_topic_partitions,
}
"""Every API the gateway forwards, with what it checks (``rules.RULES`` says which request fields each reads).
Anything else is refused (not offered, connection closed if sent anyway): inter-broker APIs, delegation tokens (the
token would be the gateway's own; kafka-python has no definition of them either), KIP-848/KIP-932 group heartbeats
(topic ids and server-side regex subscriptions the gateway cannot check), APIs without a message definition
(KIP-714 telemetry, ConsumerGroupDescribe)."""

GATEWAY_ANSWERED: Final = frozenset({ApiKey.ApiVersions, ApiKey.SaslHandshake, ApiKey.SaslAuthenticate,
                                     ApiKey.DescribeClientQuotas, ApiKey.AlterClientQuotas,
                                     ApiKey.DescribeUserScramCredentials, ApiKey.AlterUserScramCredentials})

VERSION_CAPS: Final[dict[int, int]] = {
    # caps whose reason is not a resource field (those follow from rules.RULES: topic ids in Produce/Fetch v13+,
    # OffsetCommit/OffsetFetch v10+ and DeleteTopics v6+, AddPartitionsToTxn v4+'s batched form, are fields no
    # rule covers): the compiled name walk of the data path reads Produce and Fetch up to these versions
    ApiKey.Produce: topic_names.PRODUCE_MAX,
    ApiKey.Fetch: topic_names.FETCH_MAX,
}
VERSION_MINS: Final[dict[int, int]] = {
    ApiKey.Produce: 3,  # the fast name walk reads v3+ (transactional_id)
    ApiKey.Fetch: 4,
    ApiKey.Metadata: 1,  # v0's empty list means all topics: a fully refused list could not be forwarded
}


def forwardable(api_key: int) -> bool:
    """Whether the gateway offers and forwards ``api_key``: one it has a planner for or answers itself, with a row
    in the rule table (``rules.RULES``) and a message definition (``rules.covered_range``). The same in every mode:
    every API the gateway forwards is read and authorized whether SASL is passed through or an authorizer is on."""
    return (api_key in PLANNERS or api_key in GATEWAY_ANSWERED) and rules.covered_range(api_key) is not None


def version_range(api_key: int, lo: int, hi: int) -> tuple[int, int]:
    """The versions of ``api_key`` the gateway offers, within ``lo..hi``: those Kafka's message definition
    describes whose resource-bearing fields the rule table covers (``rules.covered_range``), cut by
    :data:`VERSION_MINS` and :data:`VERSION_CAPS`. An empty range (lo > hi) when there are none."""
    covered = rules.covered_range(api_key)
    if covered is None:
        return max(lo, 1), min(hi, 0)
    lo = max(lo, VERSION_MINS.get(api_key, lo), covered[0])
    hi = min(hi, VERSION_CAPS.get(api_key, hi), covered[1])
    return lo, hi


SCAN_ONLY: Final[Mapping[int, int]] = {ApiKey.Produce: _SCAN_LIMIT, ApiKey.Fetch: sys.maxsize}
"""Without an authorizer, a request of these APIs up to this size needs no plan when ``access.hidden.may_name``
finds no hidden name's bytes in it (one substring search, nothing decoded): the data path's hot path, which the
request hook (``gateway.data.api_handlers``) takes without calling :func:`plan`, and which lets the connection core
forward such a Produce without the request hooks at all (``ConnectionCore._binds_produce``)."""


UNDECIDED: Final = Plan(None, b"")
"""What :func:`granted` returns when :func:`plan` must decide (compared by identity)."""

_TOPIC: Final = int(RT.TOPIC)
_WRITE: Final = int(OP.WRITE)
_GRANTED_OPS: Final[Mapping[int, int]] = {int(ApiKey.Produce): _WRITE, int(ApiKey.Fetch): int(OP.READ)}


def granted(access: Access, principal: str, host: str, header: protocol.RequestHeader, frame: bytes) -> Plan | None:
    """:func:`plan`'s answer for a Produce or Fetch whose topics this principal, from this host, was already allowed
    under the authorizer's current generation (every decision in :class:`Access`'s cache), decided in one step from
    the topic names in the frame: no :class:`Check`, no planner, no call per topic. The decisions are counted as
    :func:`plan` counts them. :data:`UNDECIDED` whenever :func:`plan` has something to decide or record: a topic not
    decided yet (the first request, or the first after an ACL change), refused or one of quotaflow's own; a
    transactional id; a follower's fetch; an authorizer without a generation; allowed decisions logged row by row
    (``quotaflow.authorizer.log.allowed``). The hot path of an authorizing gateway: the request hook asks it before
    :func:`plan`, and the connection core asks it to forward a Produce without the hooks, so that a request costs
    about what it costs without an authorizer (bench/authz.py)."""
    authorizer = access.authorizer
    op = _GRANTED_OPS.get(header.api_key)
    if op is None or authorizer is None or (access.audit.log_allowed and access.audit.sink is not None):
        return UNDECIDED
    generation = authorizer.generation
    known = access.principals.get(principal)
    if generation is None or generation != access._cached_generation or authorizer is not access._cached_from \
            or known is None:
        return UNDECIDED
    forward = frame
    body = header.body if header.body >= 0 else protocol.body_offset(frame, header)  # (raises: unreadable)
    if op == _WRITE:  # a Produce
        transactional_id, names = topic_names.produce_topics(frame, header, body)
        if transactional_id is not None:
            return UNDECIDED
    else:
        names = topic_names.fetch_topics(frame, header, body)
        forward = topic_names.sessionless_fetch(frame, header, body)
        if protocol.SIZE.unpack_from(forward, body)[0] >= 0:  # replica_id: a follower's fetch
            return UNDECIDED
    cache, hidden = access._cache, access.hidden.names
    for name in names:
        if name in hidden or name.startswith(RESERVED_PREFIX) or not cache.get((known, host, op, _TOPIC, name)):
            return UNDECIDED
    if names:
        access.audit.counts[(header.api_key, _TOPIC, op, True)] += len(names)
    return None if forward is frame else Plan(forward)


def plan(access: Access, scope: Requester, header: protocol.RequestHeader, frame: bytes, client_ip: str) -> Plan | None:
    """The plan for one request about to be forwarded (None: forward it as it is). Raises
    ``InvalidRequestError`` for a request that cannot be read, ``PermissionError`` for an API the gateway does not
    forward. The caller first asks :data:`SCAN_ONLY` (the hot path without an authorizer)."""
    key = header.api_key
    planner = PLANNERS.get(key)
    if planner is None:
        if forwardable(header.api_key):
            return None
        raise PermissionError(f"{protocol.api_name(header.api_key)} is not forwarded by the gateway: it cannot "
                              "authorize it")
    return planner(Check(access, scope.principal, client_ip, header.api_key), header, frame)


def cluster_allowed(access: Access, scope: Requester, api: int, client_ip: str, op: AclOperation, *,
                    super_only: bool = False) -> bool:
    """The one cluster check of the APIs the gateway answers itself (the quota, ACL and SCRAM APIs): ``op`` on the
    cluster, decided, audited and counted as every other decision. Without an authorizer, the admin list
    (``--admin-principal``, Kafka's super users: ``core.acl.principal_allowed``): no list means everyone, as a
    broker without an authorizer, except with ``super_only`` (KIP-554), where it means nobody. The authorizer is the
    configured one (``Access.own``) in SASL passthrough too: these APIs are the gateway's, not the cluster's."""
    if access.own is not None:
        check = Check(access, scope.principal, client_ip, api)
        check.authorizer = access.own
        return check.cluster(op)
    admins = scope.gateway.quota_admin.admins
    if super_only and admins is None:
        return False
    return principal_allowed(admins, scope.principal)
