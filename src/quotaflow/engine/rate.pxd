# Cython declarations for rate.py (pure-Python mode: that file is the source and the pure twin): one quota-id's
# samples as an extension type, its configuration and counters C fields, so that the per-request record-and-check
# runs as C without a Python frame (cpdef: the gateway's compiled core calls it as a C method). The samples are C
# arrays (one block from PyMem_Malloc, freed by __dealloc__), so a record and its check make no Python object; Python
# reads them through export_state (Avg, the kernels, the tests), never directly.

from cpython.mem cimport PyMem_Malloc, PyMem_Free

cdef class Rate:
    cdef readonly long long samples, window_ms, _purge_age
    cdef public object bound
    cdef public long long last_record_ms
    cdef readonly Py_ssize_t _max, _n, _current
    cdef double *_value
    cdef long long *_start
    cdef long long *_last

    cdef int _allocate(self, Py_ssize_t slots) except -1
    cdef Py_ssize_t _roll(self, long long now_ms) except -1
    cdef int _append(self, long long now_ms) except -1
    cdef long long _padded(self, long long elapsed) except -1
    cpdef long long record_and_throttle(self, double value, long long now_ms, object max_ms=*) except? -1
