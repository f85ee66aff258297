cimport cython


@cython.final
cdef class ReadyQueue:
    cdef list _buf          # ring storage; len(_buf) == capacity, a power of two
    cdef Py_ssize_t _head   # index of the front item
    cdef Py_ssize_t _count  # number of queued items
    cdef Py_ssize_t _mask   # capacity - 1

    cdef int push_c(self, object item) except -1
    cdef int push_front_c(self, object item) except -1
    cdef object pop_c(self)
    cdef int _grow(self) except -1
    cdef int _reset(self) except -1
    cdef list _snapshot(self)
