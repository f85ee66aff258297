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


# The queue's steps for a compiled caller that cimports them (the dispatch loop):
# inline C over the fields, no method call. ready_peek's caller knows the queue
# is not empty. An interpreted caller uses len(), peek(), pop(), push() and
# push_front() for the same steps.
cdef inline Py_ssize_t ready_len(ReadyQueue q) noexcept:
    return q._count

cdef inline object ready_peek(ReadyQueue q):
    return q._buf[q._head]

cdef inline object ready_pop(ReadyQueue q):
    return q.pop_c()

cdef inline int ready_push(ReadyQueue q, object item) except -1:
    return q.push_c(item)

cdef inline int ready_push_front(ReadyQueue q, object item) except -1:
    return q.push_front_c(item)
