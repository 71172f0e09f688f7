"""Kafka's StandardAuthorizer decision, from memory, with an index that keeps it flat in the number of ACLs.

The rules are Kafka's (``StandardAuthorizerData``): a super user is allowed everything; otherwise the ACLs whose
pattern applies to the literal resource are those with the equal LITERAL name, the LITERAL ``*`` and every PREFIXED
name that starts the resource name; of these, one matches the request when its principal is the session's or
``User:*``, its host is ``*`` or the client's address, and its operation is ALL, the requested one, or (ALLOW only)
one that implies it (READ / WRITE / DELETE / ALTER imply DESCRIBE, ALTER_CONFIGS implies DESCRIBE_CONFIGS). Any
matching DENY denies; else any matching ALLOW allows; else, if the resource has no ACL at all (for anyone),
``allow.everyone.if.no.acl.found`` decides, and if it has some, the answer is DENIED.

The index: per resource type, the LITERAL names in a dict, the PREFIXED names in a dict plus the set of their
lengths (a name of length n looks up its prefixes of those lengths only), and within every pattern the entries by
principal, so one decision touches the session's and ``User:*``'s entries of the few patterns that apply. An index
is immutable; :class:`StandardAuthorizer` swaps in a new one when the ACLs change (one attribute assignment, so a
decision sees the old or the new set, never a mix). The new one is made from the old and the change
(:meth:`AclIndex.updated`): the patterns and principals the change names are rebuilt, nothing else is re-indexed,
and the maps around them (and the set of bindings) are split in shards copied only where the change lands.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Final, Generic, TypeVar

from quotaflow.core.acl import (
    WILDCARD,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    java_host_address,
    kafka_principal,
    parse_principal,
)
from quotaflow.core.errors import CommandError

WILDCARD_PRINCIPAL: Final = "User:*"
STANDARD_AUTHORIZER: Final = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ACL_AUTHORIZER: Final = "kafka.security.authorizer.AclAuthorizer"  # ZooKeeper-era name: the same decision
AUTHORIZER_CLASS_NAME: Final = "authorizer.class.name"
SUPER_USERS: Final = "super.users"
ALLOW_EVERYONE_IF_NO_ACL_FOUND: Final = "allow.everyone.if.no.acl.found"
AUTHORIZER_CLASSES: Final = frozenset({STANDARD_AUTHORIZER, ACL_AUTHORIZER})

PATTERN_CACHE_NAMES: Final = 16_384  # resource names whose applicable patterns one index remembers, per type
_IMPLIES_DESCRIBE: Final = frozenset({AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE,
                                      AclOperation.DELETE, AclOperation.ALTER})
_IMPLIES_DESCRIBE_CONFIGS: Final = frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})


def operation_matches(requested: AclOperation, entry: AccessControlEntry) -> bool:
    """Whether an entry's operation covers ``requested``: ALL, equal, or (ALLOW entries only) implied."""
    op = entry.operation
    if op == AclOperation.ALL or op == requested:
        return True
    if entry.permission_type != AclPermissionType.ALLOW:
        return False  # a DENY READ does not deny DESCRIBE
    if requested == AclOperation.DESCRIBE:
        return op in _IMPLIES_DESCRIBE
    if requested == AclOperation.DESCRIBE_CONFIGS:
        return op in _IMPLIES_DESCRIBE_CONFIGS
    return False


@dataclass(frozen=True, slots=True)
class Decision:
    """One answer and the rule that gave it (Kafka's audit log names the same rules)."""

    allowed: bool
    rule: str  # SuperUser | MatchingAcl | DefaultAllow | DefaultDeny | NoMatchingAcl
    acl: AclBinding | None = None

    def __str__(self) -> str:
        if self.acl is not None:
            return f"{self.rule}(acl={self.acl})"
        return self.rule


_SUPER_USER: Final = Decision(True, "SuperUser")
_NO_MATCH: Final = Decision(False, "NoMatchingAcl")  # the resource has ACLs, none for this request: DENIED


# (host, operations it matches, is DENY, the entry): an entry with its operation rule precomputed, so matching is a
# set lookup
_Entry = tuple[str, frozenset[AclOperation], bool, AccessControlEntry]
# principal -> entries, per resource pattern
_Bucket = Mapping[str, tuple[_Entry, ...]]

_EVERY_OPERATION: Final = frozenset(AclOperation)
_NO_RESOURCE_ACL, _NO_MATCH_STATE, _ALLOWED, _DENIED = 0, 1, 2, 3


def _covers(entry: AccessControlEntry) -> frozenset[AclOperation]:
    """Every requested operation ``entry`` matches (:func:`operation_matches`, precomputed)."""
    return frozenset(op for op in _EVERY_OPERATION if operation_matches(op, entry))


K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class _Shards(Generic[K, V]):
    """A map split by key hash into ``SHARDS`` dicts, so that a copy that changes a few keys copies only their
    shards (copy on write). At 100,000 ACLs a whole-dict copy per change is one C call holding the GIL for several
    milliseconds per map; a shard is 1/64th of that. Written only while the index that owns it is being made."""

    __slots__ = ("_maps", "_own", "size")

    def __init__(self, items: Iterable[tuple[K, V]] = ()) -> None:
        self._maps: list[dict[K, V]] = [{} for _ in range(SHARDS)]
        self._own = _ALL_SHARDS  # the shards this map may write (fresh: all; a copy: none until copied)
        self.size = 0
        for k, v in items:
            self[k] = v

    def copy(self) -> _Shards[K, V]:
        out: _Shards[K, V] = _Shards.__new__(_Shards)
        out._maps, out._own, out.size = list(self._maps), frozenset(), self.size
        return out

    def get(self, key: K) -> V | None:
        return self._maps[hash(key) & _SHARD_MASK].get(key)

    def __contains__(self, key: object) -> bool:
        return key in self._maps[hash(key) & _SHARD_MASK]

    def __setitem__(self, key: K, value: V) -> None:
        shard = self._writable(hash(key) & _SHARD_MASK)
        if key not in shard:
            self.size += 1
        shard[key] = value

    def pop(self, key: K) -> V | None:
        i = hash(key) & _SHARD_MASK
        if key not in self._maps[i]:
            return None
        self.size -= 1
        return self._writable(i).pop(key)

    def _writable(self, i: int) -> dict[K, V]:
        if i not in self._own:
            self._maps[i] = dict(self._maps[i])
            self._own = self._own | {i}
        return self._maps[i]

    def __len__(self) -> int:
        return self.size

    def __bool__(self) -> bool:
        return self.size > 0

    def __iter__(self) -> Iterator[K]:
        for shard in self._maps:
            yield from shard

    def items(self) -> Iterator[tuple[K, V]]:
        for shard in self._maps:
            yield from shard.items()


SHARDS: Final = 64
_SHARD_MASK: Final = SHARDS - 1
_ALL_SHARDS: Final = frozenset(range(SHARDS))


class _TypeIndex:
    """The ACLs of one resource type."""

    __slots__ = ("_length_counts", "_patterns", "by_principal", "literal", "prefix_lengths", "prefixed", "wildcard")

    def __init__(self, bindings: Iterable[AclBinding]) -> None:
        literal: dict[str, dict[str, list[_Entry]]] = {}
        prefixed: dict[str, dict[str, list[_Entry]]] = {}
        by_principal: dict[str, set[AclBinding]] = {}
        for b in bindings:
            e = b.entry
            table = prefixed if b.pattern.pattern_type == PatternType.PREFIXED else literal
            table.setdefault(b.pattern.name, {}).setdefault(e.principal, []).append(_entry(e))
            by_principal.setdefault(e.principal, set()).add(b)
        self.literal: _Shards[str, _Bucket] = _Shards((name, _freeze(v)) for name, v in literal.items()
                                                      if name != WILDCARD)
        self.wildcard: _Bucket | None = _freeze(literal[WILDCARD]) if WILDCARD in literal else None
        self.prefixed: _Shards[str, _Bucket] = _Shards((name, _freeze(v)) for name, v in prefixed.items())
        self._length_counts: dict[int, int] = {}
        for name in prefixed:
            self._length_counts[len(name)] = self._length_counts.get(len(name), 0) + 1
        self.prefix_lengths = tuple(sorted(self._length_counts))
        self.by_principal: _Shards[str, frozenset[AclBinding]] = _Shards((p, frozenset(v))
                                                                        for p, v in by_principal.items())
        # name -> its applicable patterns: a gateway asks about the same few names over and over, so the prefix
        # lookups are done once per name and index (bounded; a new index starts with none)
        self._patterns: dict[str, list[tuple[ResourcePattern | None, _Bucket]]] = {}

    def updated(self, added: Iterable[AclBinding], removed: Iterable[AclBinding]) -> _TypeIndex:
        """A new index with ``removed`` taken out and ``added`` put in; this one is unchanged (a decision running on
        it meanwhile sees the old set whole). Only the patterns and principals named by the changes are rebuilt;
        the maps around them are copied only in the shards the changes touch (:class:`_Shards`)."""
        new = _TypeIndex(())
        new.literal, new.prefixed = self.literal.copy(), self.prefixed.copy()
        new.wildcard = self.wildcard
        new._length_counts = dict(self._length_counts)
        new.by_principal = self.by_principal.copy()
        for b in removed:
            new._change(b, add=False)
        for b in added:
            new._change(b, add=True)
        new.prefix_lengths = tuple(sorted(new._length_counts))
        return new

    def _change(self, b: AclBinding, *, add: bool) -> None:
        e, name = b.entry, b.pattern.name
        prefixed = b.pattern.pattern_type == PatternType.PREFIXED
        bucket = (self.prefixed.get(name) if prefixed
                  else self.wildcard if name == WILDCARD else self.literal.get(name))
        entries = dict(bucket or {})
        current = entries.get(e.principal, ())
        if add:
            entries[e.principal] = (*current, _entry(e))
        else:
            kept = tuple(item for item in current if item[3] != e)
            if kept:
                entries[e.principal] = kept
            else:
                entries.pop(e.principal, None)
        frozen = entries or None
        if prefixed:
            if frozen is None:
                if self.prefixed.pop(name) is not None:
                    self._length_counts[len(name)] -= 1
                    if not self._length_counts[len(name)]:
                        del self._length_counts[len(name)]
            else:
                if name not in self.prefixed:
                    self._length_counts[len(name)] = self._length_counts.get(len(name), 0) + 1
                self.prefixed[name] = frozen
        elif name == WILDCARD:
            self.wildcard = frozen
        elif frozen is None:
            self.literal.pop(name)
        else:
            self.literal[name] = frozen
        mine = self.by_principal.get(e.principal) or frozenset()
        mine = mine | {b} if add else mine - {b}
        if mine:
            self.by_principal[e.principal] = mine
        else:
            self.by_principal.pop(e.principal)

    def __bool__(self) -> bool:
        return bool(self.literal or self.prefixed or self.wildcard)

    def patterns(self, name: str) -> list[tuple[ResourcePattern | None, _Bucket]]:
        """Every pattern that applies to the literal ``name`` with its entries: the equal LITERAL, the LITERAL
        ``*``, then the PREFIXED ones, shortest first (the pattern objects are made only to name a deciding ACL, so
        they are None here; :meth:`pattern_at` makes them)."""
        cached = self._patterns.get(name)
        if cached is not None:
            return cached
        if len(self._patterns) >= PATTERN_CACHE_NAMES:
            self._patterns.clear()
        out: list[tuple[ResourcePattern | None, _Bucket]] = []
        bucket = self.literal.get(name)
        if bucket is not None:
            out.append((None, bucket))
        if self.wildcard is not None:
            out.append((None, self.wildcard))
        if self.prefixed:
            size = len(name)
            for length in self.prefix_lengths:
                if length > size:
                    break
                bucket = self.prefixed.get(name[:length])
                if bucket is not None:
                    out.append((None, bucket))
        self._patterns[name] = out
        return out

    def candidates(self, resource_type: ResourceType, name: str | None, pattern_type: PatternType,
                   principal: str | None) -> Iterator[AclBinding]:
        """Every binding of this type a filter of (``name``, ``pattern_type``, ``principal``) may match, and only
        those of the patterns it can name: a named filter looks up its patterns (LITERAL: the name; PREFIXED: the
        prefix; ANY: both; MATCH: the name, ``*`` and every indexed prefix length of the name), so the work follows
        the answer; an unnamed one walks this type's bindings (a principal's only, when it names one). A superset of
        the answer: :meth:`quotaflow.core.acl.AclBindingFilter.matches` decides."""
        if name is None:
            if principal is not None:
                yield from self.by_principal.get(principal) or ()
                return
            for _principal, held in self.by_principal.items():
                yield from held
            return
        found: list[tuple[str, PatternType, _Bucket | None]] = []
        if pattern_type in (PatternType.LITERAL, PatternType.ANY, PatternType.MATCH):
            found.append((name, PatternType.LITERAL, self.wildcard if name == WILDCARD else self.literal.get(name)))
        if pattern_type == PatternType.MATCH and name != WILDCARD:
            found.append((WILDCARD, PatternType.LITERAL, self.wildcard))
        if pattern_type in (PatternType.PREFIXED, PatternType.ANY):
            found.append((name, PatternType.PREFIXED, self.prefixed.get(name)))
        if pattern_type == PatternType.MATCH and self.prefixed:
            for length in self.prefix_lengths:
                if length > len(name):
                    break
                found.append((name[:length], PatternType.PREFIXED, self.prefixed.get(name[:length])))
        for pattern_name, kind, bucket in found:
            if bucket is None:
                continue
            pattern = ResourcePattern(resource_type, pattern_name, kind)
            groups = bucket.values() if principal is None else (bucket.get(principal) or (),)
            for entries in groups:
                for entry in entries:
                    yield AclBinding(pattern, entry[3])

    def pattern_at(self, resource_type: ResourceType, name: str, position: int) -> ResourcePattern:
        """The ``position``-th pattern :meth:`patterns` yields for ``name``."""
        candidates: list[ResourcePattern] = []
        if name in self.literal:
            candidates.append(ResourcePattern(resource_type, name, PatternType.LITERAL))
        if self.wildcard is not None:
            candidates.append(ResourcePattern(resource_type, WILDCARD, PatternType.LITERAL))
        candidates += [ResourcePattern(resource_type, name[:n], PatternType.PREFIXED) for n in self.prefix_lengths
                       if n <= len(name) and name[:n] in self.prefixed]
        return candidates[position]


def _freeze(v: dict[str, list[_Entry]]) -> dict[str, tuple[_Entry, ...]]:
    return {p: tuple(entries) for p, entries in v.items()}


_COVERS: dict[tuple[AclOperation, AclPermissionType], frozenset[AclOperation]] = {}


def _entry(e: AccessControlEntry) -> _Entry:
    """One ACL entry as a bucket holds it, its operation rule precomputed (one per operation and permission)."""
    key = (e.operation, e.permission_type)
    covers = _COVERS.get(key)
    if covers is None:
        covers = _COVERS[key] = _covers(e)
    return (e.host, covers, e.permission_type == AclPermissionType.DENY, e)


class AclIndex:
    """An immutable, indexed set of ACL bindings. :meth:`updated` makes the next one from a change, touching only
    what the change names."""

    __slots__ = ("_bindings", "_held", "_types", "indexed")

    def __init__(self, bindings: Iterable[AclBinding] = ()) -> None:
        self._held: _Shards[AclBinding, None] = _Shards((b, None) for b in bindings)
        self._bindings: frozenset[AclBinding] | None = None
        grouped: dict[ResourceType, list[AclBinding]] = {}
        for b in self._held:
            grouped.setdefault(b.pattern.resource_type, []).append(b)
        self._types = {rt: _TypeIndex(bs) for rt, bs in grouped.items()}
        self.indexed = len(self._held)
        """Bindings indexed to make this index: all of them when built, the changed ones when :meth:`updated`."""

    @property
    def bindings(self) -> frozenset[AclBinding]:
        """Every binding held, as one set (made on first use: a whole-set comparison, not the decision path)."""
        if self._bindings is None:
            self._bindings = frozenset(self._held)
        return self._bindings

    def __contains__(self, binding: object) -> bool:
        return binding in self._held

    def updated(self, added: Iterable[AclBinding] = (), removed: Iterable[AclBinding] = ()) -> AclIndex:
        """This index with ``removed`` taken out and ``added`` put in (absent removals and present additions change
        nothing), as a new index: the work is the change's, not the number of ACLs held (the set of bindings, like
        the maps of the index, is copied only in the shards the change touches)."""
        gone = {b for b in removed if b in self._held}
        new_ones = {b for b in added if b in gone or b not in self._held}
        out = AclIndex.__new__(AclIndex)
        held = self._held.copy()
        for b in gone:
            held.pop(b)
        for b in new_ones:
            held[b] = None
        out._held, out._bindings = held, None
        out.indexed = len(gone) + len(new_ones)
        by_type: dict[ResourceType, tuple[list[AclBinding], list[AclBinding]]] = {}
        for b in new_ones:
            by_type.setdefault(b.pattern.resource_type, ([], []))[0].append(b)
        for b in gone:
            by_type.setdefault(b.pattern.resource_type, ([], []))[1].append(b)
        types = dict(self._types)
        for rt, (adds, removes) in by_type.items():
            index = types.get(rt)
            index = _TypeIndex(adds) if index is None else index.updated(adds, removes)
            if index:
                types[rt] = index
            else:
                types.pop(rt, None)
        out._types = types
        return out

    def diff(self, bindings: frozenset[AclBinding]) -> tuple[frozenset[AclBinding], frozenset[AclBinding]]:
        """(added, removed): what takes this index to ``bindings``. One side is a pass over one set (an equality
        check per binding); the other is known to be empty from the sizes when the change only adds (or only
        removes), as one CreateAcls (DeleteAcls) does, so that pass is skipped."""
        held = self.bindings
        if len(bindings) >= len(held):
            added = bindings - held
            # |bindings| = |held| - |removed| + |added|
            removed = frozenset() if len(held) + len(added) == len(bindings) else held - bindings
        else:
            removed = held - bindings
            added = frozenset() if len(held) - len(removed) == len(bindings) else bindings - held
        return added, removed

    def __len__(self) -> int:
        return len(self._held)

    def matching(self, acl_filter: AclBindingFilter) -> Iterator[AclBinding]:
        """Every binding ``acl_filter`` matches (:meth:`AclBindingFilter.matches`, the one definition), unordered.
        The index only narrows the candidates (:meth:`_TypeIndex.candidates`): a filter naming a resource costs its
        answer, not the number of ACLs; one naming none walks the bindings of its type(s) (a generator: the caller
        decides how much to take at a time)."""
        pattern = acl_filter.pattern_filter
        if pattern.resource_type == ResourceType.ANY:
            types = [(rt, self._types[rt]) for rt in sorted(self._types)]
        else:
            index = self._types.get(pattern.resource_type)
            types = [] if index is None else [(pattern.resource_type, index)]
        principal = acl_filter.entry_filter.principal
        for rt, index in types:
            for b in index.candidates(rt, pattern.name, pattern.pattern_type, principal):
                if acl_filter.matches(b):
                    yield b

    def find(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
             name: str) -> tuple[int, int, AccessControlEntry | None]:
        """(state, pattern position, entry): no ACL on the resource, ACLs but none matching, ALLOWED by the entry,
        or DENIED by it (the first DENY found; any DENY wins, as in Kafka)."""
        index = self._types.get(resource_type)
        if index is None:
            return _NO_RESOURCE_ACL, -1, None
        patterns = index.patterns(name)
        if not patterns:
            return _NO_RESOURCE_ACL, -1, None
        allow: AccessControlEntry | None = None
        allow_at = -1
        position = 0
        for _pattern, bucket in patterns:
            for who in (principal, WILDCARD_PRINCIPAL):
                entries = bucket.get(who)
                if entries is None:
                    continue
                for entry_host, covers, deny, entry in entries:
                    if operation not in covers or (entry_host != WILDCARD and entry_host != host):
                        continue
                    if deny:
                        return _DENIED, position, entry
                    if allow is None:
                        allow, allow_at = entry, position
            position += 1
        if allow is not None:
            return _ALLOWED, allow_at, allow
        return _NO_MATCH_STATE, -1, None

    def decide(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType, name: str,
               default: Decision) -> Decision:
        """The decision for a non-super user with its rule (``default``: when the resource has no ACL at all)."""
        state, position, entry = self.find(principal, host, operation, resource_type, name)
        if state == _NO_RESOURCE_ACL:
            return default
        if entry is None:
            return _NO_MATCH
        binding = AclBinding(self._types[resource_type].pattern_at(resource_type, name, position), entry)
        return Decision(state == _ALLOWED, "MatchingAcl", binding)

    def by_resource_type(self, principal: str, host: str, operation: AclOperation,
                         resource_type: ResourceType) -> bool:
        """The ACL part of Kafka's default ``authorizeByResourceType``: some ALLOW (op equal or ALL, no implication)
        on a pattern of this type that no DENY dominates; a DENY on the literal ``*`` denies outright."""
        index = self._types.get(resource_type)
        if index is None:
            return False
        deny_literal: set[str] = set()
        deny_prefixed: set[str] = set()
        allow_literal: set[str] = set()
        allow_prefixed: set[str] = set()
        wildcard_allow = False
        for who in (principal, WILDCARD_PRINCIPAL):
            for b in index.by_principal.get(who) or ():
                e = b.entry
                if e.host != host and e.host != WILDCARD:
                    continue
                if e.operation != operation and e.operation != AclOperation.ALL:
                    continue
                literal = b.pattern.pattern_type == PatternType.LITERAL
                if e.permission_type == AclPermissionType.DENY:
                    if literal and b.pattern.name == WILDCARD:
                        return False
                    (deny_literal if literal else deny_prefixed).add(b.pattern.name)
                elif e.permission_type == AclPermissionType.ALLOW:
                    if literal and b.pattern.name == WILDCARD:
                        wildcard_allow = True
                    else:
                        (allow_literal if literal else allow_prefixed).add(b.pattern.name)
        if wildcard_allow:
            return True
        for literal, names in ((True, allow_literal), (False, allow_prefixed)):
            for allowed in names:
                if literal and allowed in deny_literal:
                    continue
                if not any(allowed[:n] in deny_prefixed for n in range(1, len(allowed) + 1)):
                    return True
        return False


class StandardAuthorizer:
    """:class:`quotaflow.core.acl.Authorizer` with Kafka's StandardAuthorizer semantics. ``load`` replaces the ACL
    set (the gateway calls it when the store's ACLs change) and moves ``generation``; every other method only
    reads. ``store_backed``: the
    gateway loads and refreshes its ACLs from the store (the default when no ``bindings`` are given; an authorizer
    built with fixed bindings keeps them)."""

    def __init__(self, super_users: Iterable[str] = (), allow_everyone_if_no_acl_found: bool = False,
                 bindings: Iterable[AclBinding] = (), *, store_backed: bool | None = None) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._default = Decision(allow_everyone_if_no_acl_found,
                                 "DefaultAllow" if allow_everyone_if_no_acl_found else "DefaultDeny")
        self.index = AclIndex(bindings)
        self.store_backed = not len(self.index) if store_backed is None else store_backed
        self.version = 0  # the store's ACL version the index was built from
        self.generation = 0  # Authorizer.generation: moves on every load, after the new index is in place
        self._load_lock = threading.Lock()

    def load(self, bindings: Iterable[AclBinding] | AclIndex, version: int = 0) -> None:
        """Replace every ACL. Bindings (the store's whole set) are compared with the current index and only the
        difference is indexed (:meth:`AclIndex.updated`), so one ACL change costs its own work at any number of ACLs;
        an :class:`AclIndex` built elsewhere is taken as it is. Call it off the event loop. A load of an older store
        version than the current one is ignored (two loaders raced: the poll and a change made here, each in an
        executor thread; the lock makes the check and the swap one step, so the older never lands last). Whatever
        index the difference was taken from, the result is exactly ``bindings``."""
        if isinstance(bindings, AclIndex):
            index = bindings
        else:
            target = bindings if isinstance(bindings, frozenset) else frozenset(bindings)
            base = self.index
            added, removed = base.diff(target)
            changed = len(added) + len(removed)
            index = AclIndex(target) if changed > max(len(target), len(base)) // 2 else base.updated(added, removed)
        with self._load_lock:
            if version and version < self.version:
                return
            self.index = index
            self.version = version
            # last: a reader (the gateway's loop) that sees the new generation sees the new index too, so a
            # decision cached under it is the new ACLs' decision
            self.generation += 1

    def update(self, added: Iterable[AclBinding], removed: Iterable[AclBinding], from_version: int,
               version: int) -> bool:
        """Apply a change read from the store (the bindings added and removed after ``from_version``, up to
        ``version``) to the index held, as :meth:`AclIndex.updated`: the work is the change's. Only when the index is
        still the one of ``from_version`` (another loader may have moved it meanwhile: then nothing is applied and
        the answer is False, and the caller reads the change again from the version now held). Call it off the
        event loop."""
        with self._load_lock:
            base = self.index
            if self.version != from_version:
                return False
        index = base.updated(added, removed)
        with self._load_lock:
            if self.version != from_version or self.index is not base:
                return False
            self.index = index
            self.version = version
            self.generation += 1  # last, as in load
        return True

    def explain(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
                name: str) -> Decision:
        """The decision and the rule behind it (super user, the deciding ACL, or the default)."""
        if principal in self.super_users:
            return _SUPER_USER
        return self.index.decide(principal, java_host_address(host), operation, resource_type, name, self._default)

    def authorize(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
                  name: str) -> bool:
        if principal in self.super_users:
            return True
        state = self.index.find(principal, java_host_address(host), operation, resource_type, name)[0]
        return state == _ALLOWED or (state == _NO_RESOURCE_ACL and self.allow_everyone_if_no_acl_found)

    def authorize_by_resource_type(self, principal: str, host: str, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        """Kafka's ``Authorizer.authorizeByResourceType``: first the decision on a resource named ``hardcode``
        (so super users, and the default on a type without ACLs, answer), then :meth:`AclIndex.by_resource_type`."""
        if resource_type in (ResourceType.ANY, ResourceType.UNKNOWN) or operation in (AclOperation.ANY,
                                                                                      AclOperation.UNKNOWN):
            raise ValueError(f"authorizeByResourceType needs a concrete operation and resource type, got "
                             f"{operation.name} on {resource_type.name}")
        if self.authorize(principal, host, operation, resource_type, "hardcode"):
            return True
        return self.index.by_resource_type(principal, java_host_address(host), operation, resource_type)


# -- configuration (server.properties names) -----------------------------------------------------------------------

def parse_super_users(value: str | None) -> frozenset[str]:
    """``super.users``: ``User:a;User:b`` (semicolons: DNs hold commas); each entry must be ``Type:name``."""
    out: set[str] = set()
    for item in (value or "").split(";"):
        item = item.strip()
        if item:
            try:
                parse_principal(item)
            except ValueError as e:
                raise CommandError(f"Invalid value {value} for configuration {SUPER_USERS}: {e}") from e
            out.add(item)
    return frozenset(out)


def authorizer_settings(props: Mapping[str, str], admin_principals: Iterable[str] = ()
                        ) -> tuple[frozenset[str], bool]:
    """(super users, allow.everyone.if.no.acl.found) from server.properties; ``admin_principals`` (the gateway's
    ``--admin-principal``) are super users too."""
    supers = parse_super_users(props.get(SUPER_USERS)) | {kafka_principal(p) for p in admin_principals}
    # Kafka's Boolean.parseBoolean: "true" in any case is true, anything else false
    return supers, props.get(ALLOW_EVERYONE_IF_NO_ACL_FOUND, "false").strip().lower() == "true"


def authorizer_from_properties(props: Mapping[str, str], admin_principals: Iterable[str] = ()
                               ) -> StandardAuthorizer | None:
    """The authorizer ``authorizer.class.name`` names (None when unset or empty: every request is allowed, as on a
    broker without one). ``admin_principals`` (the gateway's ``--admin-principal``) are super users too."""
    class_name = props.get(AUTHORIZER_CLASS_NAME, "").strip()
    if not class_name:
        return None
    if class_name not in AUTHORIZER_CLASSES:
        raise CommandError(f"Invalid value {class_name} for configuration {AUTHORIZER_CLASS_NAME}: the gateway "
                           f"implements {STANDARD_AUTHORIZER} (and {ACL_AUTHORIZER}, the same decision) only")
    return StandardAuthorizer(*authorizer_settings(props, admin_principals))
