"""ClientQuotasRequestTest.testDescribeClientQuotasMatchPartial: filters and their match counts over
the worked example (11 user/client entities plus ip 1.2.3.4 and 2.3.4.5), shared by the filter and admin tests."""

from __future__ import annotations

from quotaflow.core.filters import FilterComponent, QuotaFilter

E = FilterComponent.exact
D = FilterComponent.default
A = FilterComponent.any

PARTIAL_MATCH_COUNTS: list[tuple[QuotaFilter, int]] = [
    (QuotaFilter.contains([E("user", "user-1")]), 3),
    (QuotaFilter.contains([E("user", "unknown")]), 0),
    (QuotaFilter.contains([E("client-id", "client-id-2")]), 2),
    (QuotaFilter.contains([D("user")]), 2),
    (QuotaFilter.contains_only([E("user", "user-2")]), 1),
    (QuotaFilter.contains_only([E("client-id", "client-id-1")]), 0),
    (QuotaFilter.contains_only([A("user")]), 4),
    (QuotaFilter.contains([A("user")]), 10),
    (QuotaFilter.contains_only([A("client-id")]), 1),
    (QuotaFilter.contains([A("client-id")]), 7),
    (QuotaFilter.contains([A("ip")]), 2),
    (QuotaFilter.contains([]), 13),
    (QuotaFilter.contains_only([]), 0),
]
