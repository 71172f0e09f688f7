"""Client-quota administration: one API, two backends, one JSON form of its results.

* :mod:`quotaflow.admin.local`: :class:`Admin`, describe/alter/resolve over a quota store (KIP-546).
* :mod:`quotaflow.admin.wire`: :class:`~quotaflow.admin.wire.WireAdmin`, the same API over the Kafka protocol
  (DescribeClientQuotas / AlterClientQuotas) against a quotaflow gateway or a broker.
* :mod:`quotaflow.admin.codec`: the JSON documents of describe/alter/resolve results, shared by the CLI's
  ``--output json``, the gateway's ``/resolve`` route and its clients.

Both backends satisfy :class:`AdminBackend`, so the CLI, the gateway and the console talk to either alike.
"""

from quotaflow.admin.local import (
    Admin,
    AdminBackend,
    Alteration,
    AlterResult,
    Contribution,
    DescribedEntity,
    QuotaIndex,
    QuotaOp,
    Resolution,
    ResolvedQuota,
)
from quotaflow.core.entities import DEFAULT

__all__ = [
    "DEFAULT",
    "Admin",
    "AdminBackend",
    "AlterResult",
    "Alteration",
    "Contribution",
    "DescribedEntity",
    "QuotaIndex",
    "QuotaOp",
    "Resolution",
    "ResolvedQuota",
]
