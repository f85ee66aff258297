# The C declarations of fairness.py (Cython's pure-Python mode): the scheduler as
# a cdef class whose next_task / served / wake the compiled dispatch loop calls in C.
cimport cython

from blockx._fast.readyqueue cimport ready_len
from blockx.core.dispatch.records cimport InstanceState, TaskCalls


@cython.final
cdef class TaskScheduler:
    cdef bint _fair
    cdef Py_ssize_t _quantum
    cdef Py_ssize_t _window
    cdef dict _instances
    cdef InstanceState _single
    cdef InstanceState _current
    cdef Py_ssize_t _left
    cdef Py_ssize_t _seq

    cpdef object next_task(self)
    cpdef object served(self, TaskCalls task)
    cpdef object wake(self, TaskCalls task)
