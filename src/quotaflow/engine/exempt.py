"""Which requests the request quota never throttles (KIP-124, ``ClientRequestQuotaManager``), as data.

Exempt requests are recorded into ``exempt-request-time`` instead of the client's ``request-time``.
"""

from __future__ import annotations

from typing import Final

# Handlers that answer through sendResponseExemptThrottle (the follower Fetch is handled by ``follower_fetch``).
EXEMPT_THROTTLE_API_KEYS: Final = frozenset(
    {
        4,  # LeaderAndIsr
        5,  # StopReplica
        6,  # UpdateMetadata
        7,  # ControlledShutdown
        27,  # WriteTxnMarkers
        56,  # AlterPartition
    }
)

# ApiKeys with clusterAction = true: their error responses (other than CLUSTER_AUTHORIZATION_FAILED) are exempt.
CLUSTER_ACTION_API_KEYS: Final = frozenset(
    {4, 5, 6, 7, 27, 52, 53, 54, 55, 56, 57, 58, 62, 63, 67, 83, 84, 85, 86, 87}
)

PRODUCE_API_KEY: Final = 0
CLUSTER_AUTHORIZATION_FAILED: Final = 31


def is_request_quota_exempt(
    api_key: int,
    *,
    acks: int | None = None,
    follower_fetch: bool = False,
    error_code: int | None = None,
) -> bool:
    """True when the request's thread time goes to ``exempt-request-time`` and it is never throttled."""
    if api_key in EXEMPT_THROTTLE_API_KEYS or follower_fetch:
        return True
    if api_key == PRODUCE_API_KEY and acks == 0:
        return True
    return (
        api_key in CLUSTER_ACTION_API_KEYS
        and error_code not in (None, 0)
        and error_code != CLUSTER_AUTHORIZATION_FAILED
    )
