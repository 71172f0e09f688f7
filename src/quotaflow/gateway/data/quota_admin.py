"""DescribeClientQuotas (48) and AlterClientQuotas (49) over the wire, answered from the quota store.

The semantics are ``quotaflow.admin``'s (KIP-546, as KRaft implements it); this module only translates between
kafka-python's decoded messages and the admin API, and answers CLUSTER_AUTHORIZATION_FAILED as ``KafkaApis`` does
when the gateway's cluster check (``authorize.cluster_allowed``) refused: the authorizer's DESCRIBE_CONFIGS /
ALTER_CONFIGS on the cluster, or without one a principal from the admin list (:func:`principal_allowed`; no list:
everyone, as on a Kafka broker with no authorizer). Store work runs in an executor
thread; its CPU time is returned so the request quota can charge it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from typing import Any

from kafka.protocol.api_key import ApiKey

from quotaflow.admin import Admin, Alteration, AlterResult, DescribedEntity, QuotaOp
from quotaflow.core.acl import principal_allowed as principal_allowed  # the admin list's rule, re-exported
from quotaflow.core.errors import ClusterAuthorizationFailedError, KafkaError
from quotaflow.core.filters import FilterComponent, QuotaFilter
from quotaflow.core.validation import RawEntity, java_map_order
from quotaflow.gateway.collector import Pace, collector_paused, drop_gradually, loop_first
from quotaflow.gateway.wire.protocol import encode_response, response_class
from quotaflow.gateway.wire.quota_entries import encode_describe_response


def _raw_entity(entity_data: Iterable[Any]) -> RawEntity:
    # Kafka decodes the entity list into a HashMap: a repeated type collapses, the last one wins
    return {e.entity_type: e.entity_name for e in entity_data}


class QuotaAdminHandler:
    def __init__(self, admin: Admin, admins: frozenset[str] | None) -> None:
        self.admin = admin
        self.admins = admins

    async def handle(self, api_key: int, version: int, request: Any, *, allowed: bool,
                     correlation_id: int | None = None) -> tuple[Any, int]:
        """The response message for a decoded 48/49 request, and the executor thread time spent on it. ``allowed``:
        DESCRIBE_CONFIGS / ALTER_CONFIGS on the cluster, decided by the gateway's one cluster check
        (``authorize.cluster_allowed``: its authorizer, else the admin list). With ``correlation_id`` the response
        comes back encoded (the framed bytes): a describe of 100,000 entities is encoded in the executor thread too,
        never on the event loop."""

        def run() -> tuple[Any, int]:
            start = time.thread_time_ns()
            if api_key == ApiKey.DescribeClientQuotas:
                # every entity: short-lived, acyclic objects, freed by reference counting; the loop takes the GIL
                # back within a millisecond whenever it wants it
                with collector_paused(), loop_first():
                    if correlation_id is None:
                        response = self.describe(version, request, allowed)
                    else:
                        response = self.describe_encoded(version, request, allowed, correlation_id)
            elif api_key == ApiKey.AlterClientQuotas:
                response = self.alter(version, request, allowed)
                if correlation_id is not None:
                    response = encode_response(response, version, correlation_id)
            else:
                raise ValueError(f"not a quota admin api: {api_key}")
            return response, time.thread_time_ns() - start

        return await asyncio.get_running_loop().run_in_executor(None, run)

    # -- describe ---------------------------------------------------------------------------------------------

    def _find(self, request: Any, allowed: bool,
              pace: Callable[[], None] | None = None) -> list[DescribedEntity] | KafkaError:
        if not allowed:
            return ClusterAuthorizationFailedError()
        quota_filter = QuotaFilter(
            tuple(FilterComponent(c.entity_type, c.match_type, c.match) for c in request.components),
            bool(request.strict),
        )
        try:
            return self.admin.describe(quota_filter, pace)
        except KafkaError as e:
            return e

    def describe(self, version: int, request: Any, allowed: bool) -> Any:
        """The response as a kafka-python message."""
        cls = response_class(ApiKey.DescribeClientQuotas, version)
        found = self._find(request, allowed)
        if isinstance(found, KafkaError):
            # refused: getErrorResponse(Errors.CLUSTER_AUTHORIZATION_FAILED.exception): ApiError.fromThrowable's
            # message, null for the generic error, and null entries
            return cls(throttle_time_ms=0, error_code=found.errno, error_message=found.message, entries=None)
        entries = [self._described(cls, d) for d in found]
        drop_gradually(found)
        return cls(throttle_time_ms=0, error_code=0, error_message=None, entries=entries)

    def describe_encoded(self, version: int, request: Any, allowed: bool, correlation_id: int,
                         pace: Callable[[], None] | None = None) -> bytes:
        """The framed response, the same bytes as :meth:`describe` encoded, made from the entities directly
        (:mod:`quotaflow.gateway.wire.quota_entries`: no message object per entity); matching, encoding and freeing
        in bounded pieces with ``pace`` called between them (``collector.Pace``: the GIL and the CPU yielded after
        each half millisecond of work)."""
        pace = Pace() if pace is None else pace
        found = self._find(request, allowed, pace)
        if isinstance(found, KafkaError):
            return encode_describe_response(version, correlation_id, None, error_code=found.errno,
                                            error_message=found.message)
        encoded = encode_describe_response(version, correlation_id, found, pace=pace)
        drop_gradually(found, pace=pace)
        return encoded

    @staticmethod
    def _described(cls: Any, d: DescribedEntity) -> Any:
        wire = d.entity.to_wire()
        entry = cls.EntryData
        return entry(
            entity=[entry.EntityData(entity_type=t, entity_name=wire[t]) for t in java_map_order(wire)],
            values=[entry.ValueData(key=k, value=float(d.values[k])) for k in java_map_order(d.values)],
        )

    # -- alter ------------------------------------------------------------------------------------------------

    def alter(self, version: int, request: Any, allowed: bool) -> Any:
        cls = response_class(ApiKey.AlterClientQuotas, version)
        if not allowed:
            # getErrorResponse: every entry of the request echoed, its entity as sent, with code 31 and
            # Errors.message() (the generic text: this one is not ApiError's)
            error = ClusterAuthorizationFailedError()
            entry = cls.EntryData
            return cls(throttle_time_ms=0, entries=[
                entry(error_code=error.errno, error_message=error.description,
                      entity=[entry.EntityData(entity_type=e.entity_type, entity_name=e.entity_name)
                              for e in requested.entity]) for requested in request.entries])
        alterations = [
            Alteration(_raw_entity(e.entity), tuple(QuotaOp(op.key, None if op.remove else float(op.value))
                                                    for op in e.ops))
            for e in request.entries
        ]
        results: list[AlterResult] = self.admin.alter(alterations, validate_only=bool(request.validate_only))
        return cls(throttle_time_ms=0,
                   entries=[self._result(cls, r.entity, r.error.code, r.error.message) for r in results])

    @staticmethod
    def _result(cls: Any, entity: RawEntity, code: int, message: str | None) -> Any:
        entry = cls.EntryData
        return entry(error_code=code, error_message=message,
                     entity=[entry.EntityData(entity_type=t, entity_name=entity[t]) for t in java_map_order(entity)])
