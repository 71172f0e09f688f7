"""Engine: Kafka-exact metering and throttling. Pure code: no I/O, no asyncio; time is an argument.

Per request: :class:`ClientQuotaManager` (one per :class:`QuotaType`), :mod:`.throttle` to combine managers,
:func:`apply_changes` for live quota updates. In bulk: :func:`decide_groups` over a :class:`KernelState`.
"""

from quotaflow.engine.client_quota import (
    INACTIVE_SENSOR_EXPIRATION_MS,
    NANOS_TO_PERCENT,
    ClientQuotaManager,
    QuotaId,
    QuotaTypesTracking,
    nanos_to_percent,
)
from quotaflow.engine.controller_mutation import (
    ControllerMutationQuota,
    MutationThrottledError,
    PermissiveControllerMutationQuota,
    StrictControllerMutationQuota,
    UnboundedControllerMutationQuota,
    is_strict,
)
from quotaflow.engine.exempt import CLUSTER_ACTION_API_KEYS, EXEMPT_THROTTLE_API_KEYS, is_request_quota_exempt
from quotaflow.engine.metrics import MetricSample, MetricSource, PrometheusCollector
from quotaflow.engine.quota_type import QuotaType
from quotaflow.engine.quota_utils import bounded_throttle_time, java_round, throttle_time, to_int32
from quotaflow.engine.rate import Rate
from quotaflow.engine.stats import Avg, CumulativeSum
from quotaflow.engine.throttle import (
    NOT_THROTTLED,
    ThrottleDecision,
    bandwidth_throttle,
    combine,
    fetch_throttle,
    produce_throttle,
    request_throttle,
)
from quotaflow.engine.token_bucket import TokenBucket
from quotaflow.engine.updates import (
    IpConnectionRateTarget,
    QuotaChange,
    QuotaManagers,
    apply_change,
    apply_changes,
    java_double_to_int,
    snapshot_changes,
)

__all__ = [
    "CLUSTER_ACTION_API_KEYS",
    "EXEMPT_THROTTLE_API_KEYS",
    "INACTIVE_SENSOR_EXPIRATION_MS",
    "MODE_CHECK",
    "MODE_NOCHECK",
    "MODE_SKIP",
    "NANOS_TO_PERCENT",
    "NOT_THROTTLED",
    "Avg",
    "ClientQuotaManager",
    "ControllerMutationQuota",
    "CumulativeSum",
    "IpConnectionRateTarget",
    "KernelState",
    "MetricSample",
    "MetricSource",
    "MutationThrottledError",
    "PermissiveControllerMutationQuota",
    "PrometheusCollector",
    "QuotaChange",
    "QuotaId",
    "QuotaManagers",
    "QuotaType",
    "QuotaTypesTracking",
    "Rate",
    "StrictControllerMutationQuota",
    "ThrottleDecision",
    "TokenBucket",
    "UnboundedControllerMutationQuota",
    "WindowReading",
    "apply_change",
    "apply_changes",
    "bandwidth_throttle",
    "bounded_throttle_time",
    "combine",
    "decide_groups",
    "fetch_throttle",
    "is_request_quota_exempt",
    "is_strict",
    "java_double_to_int",
    "java_round",
    "nanos_to_percent",
    "produce_throttle",
    "read_window",
    "request_throttle",
    "snapshot_changes",
    "throttle_time",
    "to_int32",
]

# The bulk kernel pulls in numba (~0.6 s to import); load it only when asked for, so per-request users (the
# gateway, the CLIs) start fast.
_KERNEL_NAMES = frozenset({"MODE_CHECK", "MODE_NOCHECK", "MODE_SKIP", "KernelState", "WindowReading", "decide_groups",
                           "read_window"})


def __getattr__(name: str) -> object:
    if name in _KERNEL_NAMES:
        from quotaflow.engine import kernel

        return getattr(kernel, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
