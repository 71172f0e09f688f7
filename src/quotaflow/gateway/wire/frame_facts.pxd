# Cython declarations for frame_facts.py (pure-Python mode: that file is the source and the pure twin): the two
# reads every forwarded request and response takes, as cpdef, so that the compiled connection core (connection.pxd
# cimports them) calls them as C functions, without a Python call and its argument parsing.

from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_SET_ITEM
from cpython.type cimport PyType_GenericAlloc, PyType_IsSubtype

cpdef tuple read_request(bytes frame, bytes flexible_from, type header=*, Py_ssize_t offset=*)
cpdef long long correlation_id(bytes frame, Py_ssize_t offset=*) except? -2
cdef object _new_tuple(type cls, Py_ssize_t size)
cdef void _put(object made, Py_ssize_t i, object value) noexcept
