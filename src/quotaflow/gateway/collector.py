"""Keeping Python's cycle collector, and control-plane threads, off the event loop's back at Kafka-scale state.

A gateway holds its store's quota entities and ACLs (100,000 of each is a few million objects) for its lifetime. A
full (generation 2) collection walks every tracked object while holding the GIL: hundreds of milliseconds in which
no client is served. Two measures, both about *when* the collector runs, never about what it frees:

* :func:`freeze_long_lived`: after start-up loading, everything alive moves to the permanent generation
  (``gc.freeze``), so later collections walk only what was made since. These objects are indexes and values without
  reference cycles: when replaced they are still freed by reference counting.
* :func:`collector_paused`: a control-plane read that makes hundreds of thousands of short-lived, acyclic objects
  at once (the store's whole ACL set, a describe of every entity) runs with the collector paused, so those objects
  do not trigger full collections while they exist; they are freed by reference counting when the read is done.
  Pauses nest across threads (a count), and the collector is enabled again only if it was enabled before.

Sharing the GIL is the third: control-plane work in an executor thread (a describe of every entity, the first ACL
load) holds the GIL for up to ``sys.getswitchinterval()`` (5 ms) each time the event loop wants it back, and the
loop wants it after every wait for sockets, several times a round trip. :func:`loop_first` lowers the switch interval
to ``LOOP_FIRST_SWITCH_S`` while such work runs, so the loop waits at most about that long each time; it applies
only while some thread waits for the GIL, so it costs nothing when the loop has nothing to do.

Sharing the CPU is the fourth. On a loaded host (more runnable threads than cores) the operating system preempts a
thread that computes for long, and a thread preempted while it holds the GIL keeps it until it is scheduled again:
the event loop cannot run for that whole wait, whatever the switch interval (a stack and scheduler sampler in a
gateway at load 4-5 on 2 cores found most of the 20-50 ms round trips of a describe of every ACL or entity to be
the executor thread waiting 8-37 ms in the run queue while holding the GIL, having run 1-5 ms of it). A
:class:`Pace` makes such work sleep ``PACE_NAP_S`` (the GIL and the CPU given up) after each ``PACE_BURST_S`` of
computing, at the bounded steps where the work calls it: it then rarely outlives its time slice in one burst, and a
preemption mostly lands where no one waits for it. A sleep, not ``sched_yield``: under Linux's EEVDF scheduler each
yield pushes the thread's deadline a slice further, so any task that wakes preempts it at once, GIL held (measured:
worse worst cases than no pacing at all when other processes wake often).

Freeing is the other stall: dropping the last reference to a structure of 400,000 objects frees them all in one C
cascade that never lets go of the GIL (~100 ms at that size). :func:`drop_gradually` frees a big list a chunk at a
time, from Python, so the event loop gets the GIL between chunks.
"""

from __future__ import annotations

import gc
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from time import perf_counter
from typing import Any, Final

from quotaflow.gateway.wire.direct import unpaced

DROP_CHUNK: Final = 1000
LOOP_FIRST_SWITCH_S: Final = 0.0005
PACE_BURST_S: Final = 0.0005  # the longest a paced thread computes (holds the GIL) before it naps
PACE_NAP_S: Final = 0.0001  # the nap: the GIL and the CPU given up (~0.15 ms with the timer's slack)

_lock = threading.Lock()
_paused = 0
_was_enabled = False
_switching = 0
_was_interval = 0.0


def freeze_long_lived() -> int:
    """Move every object alive now out of the collector's walks (``gc.freeze``); how many are frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


@contextmanager
def collector_paused() -> Iterator[None]:
    """No automatic cycle collection while the block runs (any thread; nests)."""
    global _paused, _was_enabled
    with _lock:
        if _paused == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _paused += 1
    try:
        yield
    finally:
        with _lock:
            _paused -= 1
            if _paused == 0 and _was_enabled:
                gc.enable()


@contextmanager
def loop_first() -> Iterator[None]:
    """The GIL's switch interval at ``LOOP_FIRST_SWITCH_S`` while the block runs (any thread; nests), then back to
    what it was before the first."""
    global _switching, _was_interval
    with _lock:
        if _switching == 0:
            _was_interval = sys.getswitchinterval()
            sys.setswitchinterval(min(_was_interval, LOOP_FIRST_SWITCH_S))
        _switching += 1
    try:
        yield
    finally:
        with _lock:
            _switching -= 1
            if _switching == 0:
                sys.setswitchinterval(_was_interval)


class Pace:
    """Called between bounded steps of long control-plane work in a thread beside the event loop: once the thread
    has computed ``burst_s`` since its last nap, it sleeps ``nap_s`` (releasing the GIL and the CPU), so the loop
    and other processes run between bursts rather than behind a preempted GIL holder. Costs a clock read per call;
    counts its naps."""

    __slots__ = ("_since", "burst_s", "nap_s", "naps")

    def __init__(self, burst_s: float = PACE_BURST_S, nap_s: float = PACE_NAP_S) -> None:
        self.burst_s = burst_s
        self.nap_s = nap_s
        self.naps = 0
        self._since = perf_counter()

    def __call__(self) -> None:
        if perf_counter() - self._since >= self.burst_s:
            time.sleep(self.nap_s)
            self.naps += 1
            self._since = perf_counter()


def drop_gradually(items: list[Any], chunk: int = DROP_CHUNK, pace: Callable[[], None] = unpaced) -> None:
    """Empty ``items`` from the end, ``chunk`` at a time (whatever only it referenced is freed chunk by chunk),
    ``pace`` called between chunks."""
    while items:
        del items[-chunk:]
        pace()
