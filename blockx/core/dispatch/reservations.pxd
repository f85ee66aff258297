cimport cython


@cython.final
cdef class Reservations:
    cdef dict _attempts     # call id -> dispatched attemptSeq (NOT_DISPATCHED until sent)
    cdef set _draining
