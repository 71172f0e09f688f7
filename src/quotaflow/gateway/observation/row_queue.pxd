# Cython declarations for row_queue.py (pure-Python mode: that file is the source and the pure twin): the loop side
# of one kind of event-log row as an extension type, so that the compiled connection core (connection.pxd cimports
# this) appends a request's row with C calls only.

cdef class RowQueue:
    cdef public object rows, next_seq, refusal
    cdef public long long appended

    cpdef append(self, object row)
