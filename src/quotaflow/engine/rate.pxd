# Cython declarations for rate.py (pure-Python mode: that file is the source and the pure twin): one quota-id's
# samples as an extension type, its configuration and counters C fields, so that the per-request record-and-check
# runs as C without a Python frame (cpdef: the gateway's compiled core calls it as a C method). The sample lists
# stay Python lists: Avg, export_state and the kernels read them.

cdef class Rate:
    cdef readonly long long samples, window_ms, _purge_age
    cdef public object bound
    cdef public long long last_record_ms
    cdef readonly Py_ssize_t _max, _n
    cdef public Py_ssize_t _current
    cdef public list _value, _start, _last

    cdef Py_ssize_t _roll(self, long long now_ms) except -1
    cdef _append(self, long long now_ms)
    cpdef long long record_and_throttle(self, double value, long long now_ms, object max_ms=*) except? -1
