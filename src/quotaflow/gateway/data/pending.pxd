# Cython declarations for pending.py (pure-Python mode: that file is the source and the pure twin): one request's
# state as an extension type, its fields C fields where they are counters and flags, so that the compiled connection
# core makes one without bytecode and reads its fields as struct members.

cimport cython


cdef class Pending:
    cdef public object header, acks, local, reply, forward, mutations, fetch_cap, response, decisions, authz, handler
    cdef public object shadow, shadow_mutations
    cdef public Py_ssize_t request_bytes
    cdef public long long received_ms, thread_ns, network_ns, hold_then_close_ms
    cdef public bint forwarded, local_api_versions, close_after, holds_reading, exempt, oversized, bound, framed


cpdef Pending new_pending(object header, Py_ssize_t request_bytes, long long received_ms)


@cython.locals(header=tuple)
cpdef tuple request_row(str broker, str listener, str user, str client_ip, Pending pending,
                        Py_ssize_t response_bytes, long long now_ms, long long seq)
