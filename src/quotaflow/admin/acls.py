"""ACL administration over a store: create, describe and delete bindings as Kafka's controller does, and resolve
"may P do O on R, and which ACL decides".

* :meth:`AclAdmin.create`: per binding, Kafka's validation and messages (``AclApis`` and
  ``AclControlManager.validateNewAcl``: INVALID_REQUEST "Invalid resourceType ANY", "Resource name should not be
  empty", ...); the valid ones are stored in one call; an existing binding succeeds and changes nothing. More than
  10,000 new bindings in one request fail it whole (UNKNOWN_SERVER_ERROR, nothing stored), as Kafka's bounded
  record list does.
* :meth:`AclAdmin.describe`: every binding an :class:`~quotaflow.core.acl.AclBindingFilter` matches (ANY and MATCH
  pattern filters included).
* :meth:`AclAdmin.delete`: per filter, every binding it matches is removed and returned; a filter with an UNKNOWN
  part fails with "Unknown patternFilter." / "Unknown entryFilter."; one request removes at most 10,000 bindings
  (Kafka's ``MAX_RECORDS_PER_USER_OP``; the filter that would pass it fails, UNKNOWN_SERVER_ERROR).
* :func:`resolve` answers with the decision of a :class:`~quotaflow.core.authorizer.StandardAuthorizer` built on the
  store's ACLs and the given super users / default, so the CLI, the console and the gateway decide alike.

The CLI (``quotaflow acls``), the console and the gateway's CreateAcls / DescribeAcls / DeleteAcls answers all call
this module.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

from quotaflow.core.acl import ANY_FILTER, AclBinding, AclBindingFilter, AclOperation, ResourceType, binding_problem
from quotaflow.core.authorizer import AclIndex, Decision, StandardAuthorizer
from quotaflow.core.errors import SUCCESS, ApiError, InvalidRequestError, UnknownServerError
from quotaflow.store.base import AclStore

MAX_RECORDS_PER_USER_OP: Final = 10_000  # Kafka's QuorumController bound on one request's records


@dataclass(frozen=True, slots=True)
class AclDeleteResult:
    """One filter's outcome: its error, and the bindings it removed."""

    error: ApiError = SUCCESS
    deleted: tuple[AclBinding, ...] = field(default_factory=tuple)


SORT_RUN: Final = 500  # bindings sorted in one C call (~1 ms here); longer lists are sorted in runs and merged
PACE_STEP: Final = 256  # bindings taken from a computing iterator (a filter of the index, a merge) between paces


def _listed(items: Iterable[AclBinding], pace: Callable[[], None] | None) -> list[AclBinding]:
    """``items`` as a list (a list as it is), ``pace`` called after every ``PACE_STEP`` items taken."""
    if isinstance(items, list):
        return items
    if pace is None:
        return list(items)
    out: list[AclBinding] = []
    it: Iterator[AclBinding] = iter(items)
    while len(out) % PACE_STEP == 0:
        size = len(out)
        out.extend(itertools.islice(it, PACE_STEP))
        pace()
        if len(out) == size:
            break
    return out


def sort_bindings(bindings: Iterable[AclBinding], pace: Callable[[], None] | None = None) -> list[AclBinding]:
    """A stable order for answers and listings (resource type, name, pattern type, then the entry).

    A list longer than ``SORT_RUN`` is sorted in runs of that size, merged from Python (:func:`heapq.merge`): one
    ``sorted`` of 100,000 bindings is a C call that holds the GIL for ~0.3 s on a slow core, and a gateway answers
    describes in a thread beside its event loop. The order is the same (the key holds every field, so no two
    bindings tie). ``pace`` (a gateway's :class:`~quotaflow.gateway.collector.Pace`) is called after each run and
    each ``PACE_STEP`` bindings merged."""
    listed = _listed(bindings, pace)
    if len(listed) <= SORT_RUN:
        return sorted(listed, key=AclBinding.sort_key)
    runs = []
    for i in range(0, len(listed), SORT_RUN):
        runs.append(sorted(listed[i:i + SORT_RUN], key=AclBinding.sort_key))
        if pace is not None:
            pace()
    return _listed(heapq.merge(*runs, key=AclBinding.sort_key), pace)


def delete_matching(filters: Sequence[AclBindingFilter], matching: Callable[[AclBindingFilter], Iterable[AclBinding]]
                    ) -> tuple[list[AclDeleteResult], list[AclBinding]]:
    """DeleteAcls' outcome per filter, and the bindings to remove (in order), over one set of bindings that
    ``matching`` answers from (every binding a filter matches, in any order: a store's snapshot filtered, or the
    gateway's index). A filter with an UNKNOWN part fails with Kafka's message; a filter that would take the request
    past ``MAX_RECORDS_PER_USER_OP`` fails (UNKNOWN_SERVER_ERROR, no message), the others stand. A binding two
    filters match is reported by both."""
    results: list[AclDeleteResult] = []
    removing: set[AclBinding] = set()
    for acl_filter in filters:
        if acl_filter.pattern_filter.is_unknown:
            results.append(AclDeleteResult(ApiError(InvalidRequestError.errno, "Unknown patternFilter.")))
            continue
        if acl_filter.entry_filter.is_unknown:
            results.append(AclDeleteResult(ApiError(InvalidRequestError.errno, "Unknown entryFilter.")))
            continue
        # one more than the bound is enough to know the filter fails (a filter of every ACL at 100,000 stops there)
        matched = set(itertools.islice(matching(acl_filter), MAX_RECORDS_PER_USER_OP + 1))
        if len(matched) > MAX_RECORDS_PER_USER_OP or len(removing | matched) > MAX_RECORDS_PER_USER_OP:
            # Kafka: BoundedListTooLongException, answered as UNKNOWN_SERVER_ERROR without a message
            results.append(AclDeleteResult(ApiError(UnknownServerError.errno, None)))
            continue
        removing.update(matched)
        results.append(AclDeleteResult(SUCCESS, tuple(sort_bindings(list(matched)))))
    return results, sort_bindings(list(removing))


class AclBackend(Protocol):
    """What the CLI manages ACLs through: a store (:class:`AclAdmin`) or the Kafka protocol
    (:class:`~quotaflow.admin.acl_wire.WireAclAdmin`)."""

    def create(self, bindings: Sequence[AclBinding]) -> list[ApiError]: ...

    def describe(self, acl_filter: AclBindingFilter) -> list[AclBinding]: ...

    def delete(self, filters: Sequence[AclBindingFilter]) -> list[AclDeleteResult]: ...


class AclAdmin:
    """Create / describe / delete ACL bindings in an :class:`~quotaflow.store.base.AclStore`."""

    def __init__(self, store: AclStore) -> None:
        self.store = store

    def create(self, bindings: Sequence[AclBinding]) -> list[ApiError]:
        """One result per binding, in request order."""
        results: list[ApiError] = []
        valid: list[AclBinding] = []
        for binding in bindings:
            problem = binding_problem(binding)
            if problem is None:
                valid.append(binding)
                results.append(SUCCESS)
            else:
                results.append(ApiError(InvalidRequestError.errno, problem))
        if valid:
            # only a request naming more bindings than the bound needs the store's set (to count the new ones)
            if len(set(valid)) > MAX_RECORDS_PER_USER_OP and len(
                    set(valid) - self.store.acls().bindings) > MAX_RECORDS_PER_USER_OP:
                return [ApiError(UnknownServerError.errno, None)] * len(bindings)
            self.store.add_acls(valid)
        return results

    def describe(self, acl_filter: AclBindingFilter, index: AclIndex | None = None,
                 pace: Callable[[], None] | None = None) -> list[AclBinding]:
        """Every binding ``acl_filter`` matches, in :func:`sort_bindings` order. With ``index`` (an index of this
        store's ACLs that the caller has brought up to date: the gateway's authorizer's) they are found through the
        index, and the store's whole set is not read. ``pace``: called between bounded steps (:func:`sort_bindings`)."""
        if index is not None:
            return sort_bindings(_listed(index.matching(acl_filter), pace), pace)
        return sort_bindings(_listed((b for b in self.store.acls().bindings if acl_filter.matches(b)), pace), pace)

    def delete(self, filters: Sequence[AclBindingFilter], index: AclIndex | None = None) -> list[AclDeleteResult]:
        """Every filter is matched against the same set (:func:`delete_matching`): the store's snapshot, or
        ``index`` as :meth:`describe` takes it; the union is removed in one store call."""
        if index is not None:
            results, removing = delete_matching(filters, index.matching)
        else:
            current = self.store.acls().bindings
            results, removing = delete_matching(filters, lambda f: (b for b in current if f.matches(b)))
        if removing:
            self.store.remove_acls(removing)
        return results


def resolve(source: AclStore | AclBackend, principal: str, host: str, operation: AclOperation,
            resource_type: ResourceType, name: str, *, super_users: Iterable[str] = (),
            allow_everyone_if_no_acl_found: bool = False) -> Decision:
    """The decision the gateway's authorizer makes for this request, with the rule (the deciding ACL) behind it, over
    a store's ACLs or every ACL a backend describes."""
    bindings = source.acls().bindings if isinstance(source, AclStore) else source.describe(ANY_FILTER)
    authorizer = StandardAuthorizer(super_users, allow_everyone_if_no_acl_found, bindings)
    return authorizer.explain(principal, host, operation, resource_type, name)


def explain(decision: Decision, principal: str, operation: AclOperation, resource_type: ResourceType,
            name: str) -> str:
    """One sentence for people: what was decided and why."""
    verdict = "ALLOWED" if decision.allowed else "DENIED"
    what = f"{principal} {operation.name} on {resource_type.name}:{name}: {verdict}"
    if decision.rule == "SuperUser":
        return f"{what} ({principal} is a super user)"
    if decision.acl is not None:
        return f"{what} by {decision.acl.pattern} {decision.acl.entry}"
    if decision.rule == "NoMatchingAcl":
        return f"{what} (the resource has ACLs, none of them matches)"
    return f"{what} (no ACL on the resource; allow.everyone.if.no.acl.found=" \
           f"{'true' if decision.allowed else 'false'})"
