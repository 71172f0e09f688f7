# Cython declarations for framing.py (pure-Python mode: that file is the source and the pure twin): the receive
# side's fields as C fields and its methods as cpdef, so that the compiled connection core (connection.pxd cimports
# this) calls them as C functions, a dozen times per request, without a Python attribute lookup or call.

cdef class FrameBuffer:
    cdef bytearray _buf
    cdef object _view
    cdef Py_ssize_t _start, _end, _size, _allocated, _got, _max, _initial
    cdef list _chunks
    cdef bint _into_chunk
    cdef public bint partial, framed

    cpdef object buffer(self)
    cpdef updated(self, int nbytes)
    cpdef feed(self, object data)
    cpdef object pop(self, int limit, str setting, bint framed=*)
    cpdef int wants(self) except -1
    cpdef grant(self, int size)
    cpdef _fill(self)
    cpdef _compact(self)
    cpdef bint release(self) except -1
    cpdef bint room(self) except -1
    cpdef _grow(self, Py_ssize_t need)
