# Cython declarations for connection.py (pure-Python mode: that file is the source and the pure twin): the
# connection core's fields as C fields, typed where they are flags, counters and clocks, and its per-request methods
# as cdef (called through the type's C table: no Python lookup, and no check for a Python override, which a cpdef
# method of a type with a Python subclass makes at each call), so the steps a request takes call each other and read
# the connection's state in C; cpdef where Python calls them (_pump, hold_limited_produce, _mute).

cimport cython
from posix.time cimport CLOCK_MONOTONIC, CLOCK_REALTIME, clock_gettime, timespec

from quotaflow.engine.rate cimport Rate
from quotaflow.gateway.data.enforcement cimport Enforcement
from quotaflow.gateway.data.framing cimport FrameBuffer
from quotaflow.gateway.data.pending cimport Pending, new_pending, request_row
from quotaflow.gateway.wire.frame_facts cimport correlation_id, read_request
from quotaflow.gateway.observation.row_queue cimport RowQueue


cdef class DecisionClock:
    cdef public long long last_ms

    @cython.locals(now=cython.longlong)
    cpdef long long now_ms(self)


cdef class ProduceBinding:
    cdef public object manager, request, user, client_id
    cdef public Rate sensor
    cdef public long long generation, expiration_ms
    cdef public bint limited

    @cython.locals(generation=cython.longlong)
    cpdef bint holds(self, object user, object client_id, long long now_ms) except -1


cdef class UpstreamCore


cdef class ConnectionCore:
    cdef public bytes _offered
    cdef public object gateway, node, broker, listener, client_ip, principal, sasl, transport, _write
    cdef public Enforcement enforcement
    cdef public FrameBuffer _frames
    cdef public UpstreamCore _upstream
    cdef public object _tls, _loop, _busy, _pool
    cdef public list _queue, _awaiting
    cdef public ProduceBinding _produce_binding
    cdef public object _produce_scan, _produce_access
    cdef public DecisionClock _clock
    cdef public bint _binds_decisions
    cdef public object _mute_timer, _hold_timer, _closed, _limit, _preauth_limit
    cdef public int client_port
    cdef public double last_active, muted_until, frame_since, _progress, _waiting_since
    cdef public Py_ssize_t _max_in_flight, _max_unsent, _held, _unsent, _unsent_local
    cdef public long long _auth_ns
    cdef public bint _waiting_memory, _stopped, _closing, _reading, _upstream_reading, _upstream_blocked
    cdef public bint _admitted, _pumping, _again, _cut, _write_paused, _sasl_quiet

    cpdef _pump(self)
    cdef _set_reading(self, int gate)
    cdef int _gate(self) except -1
    @cython.locals(unsent=Py_ssize_t)
    cdef bint _over_unsent_bound(self, bint upstream) except -1
    @cython.locals(frame=bytes, off=Py_ssize_t)
    cdef int _take(self) except -1
    cdef tuple _frame_limit(self)
    @cython.locals(start=cython.longlong, now=cython.longlong)
    cdef object _take_request(self, object frame, Py_ssize_t off)
    cdef _enqueue(self, Pending pending)
    @cython.locals(now_ms=cython.longlong, key=long)
    cdef Pending _on_request(self, bytes framed, Py_ssize_t off)
    cdef bint _binds_produce(self, Pending pending, bytes framed, Py_ssize_t off) except -1
    cdef ProduceBinding _binding(self, Pending pending, long long now_ms)
    @cython.locals(sensor=Rate)
    cdef object _decide_bound_produce(self, Pending pending, long long now_ms)
    cdef _forward(self, Pending pending)
    @cython.locals(pending=Pending, bound=bint, framed=bint, frame=bytes, awaiting=list, expected=cython.longlong)
    cdef _read_upstream(self, UpstreamCore upstream)
    @cython.locals(pending=Pending, clock=cython.longlong, queue=list)
    cdef _flush(self)
    @cython.locals(header=tuple, rows=RowQueue, end=cython.longlong, key=long, enforcement=Enforcement)
    cdef long long _send(self, Pending pending, bytes frame, long long start) except? -1
    @cython.locals(header=tuple, switch_ms=cython.longlong, enforcement=Enforcement)
    cdef int _decide(self, Pending pending, object frame, long long now_ms) except? -1
    @cython.locals(header=tuple)
    cdef object _render(self, Pending pending, object frame, int throttle)
    cpdef _mute(self, long long throttle_ms)
    cpdef hold_limited_produce(self, Pending pending)
    cdef _hold_reading(self, Pending pending)
    cdef public object _upstream_route


cdef class UpstreamCore:
    cdef public ConnectionCore conn
    cdef public object transport, write, _writer
    cdef public FrameBuffer frames


cpdef bint _supported(bytes table, long api_key, long version) except -1
cdef bint _in(bytes table, long api_key) except -1
cdef tuple _header(Pending pending)
cdef long long _clock_ns() except? -1
cdef long long _wall_ms() except? -1
cdef object _body(Pending pending, object frame)
@cython.locals(needle=bytes)
cdef bint _names_any(bytes frame, tuple needles) except -1


cdef extern from "string.h":  # (glibc's, declared under _GNU_SOURCE, which pyconfig.h defines)
    const void *memmem(const void *haystack, size_t haystacklen, const void *needle, size_t needlelen)
cdef Py_ssize_t _API_KEY, _API_VERSION, _CORRELATION_ID, _CLIENT_ID
# constants the core compares with on every request: C integers, not module-dictionary lookups
cdef int _STOP, _BUFFER, _TAKE
cdef long _API_VERSIONS, _PRODUCE, _SASL_HANDSHAKE, _SASL_AUTHENTICATE
cdef Py_ssize_t _PRODUCE_SCAN_LIMIT, _TLS_RECORD
cdef bytes _LOCAL, _COUNTED
