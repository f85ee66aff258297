cimport cython


@cython.final
cdef class FrameChecks:
    cdef readonly str execute_call
    cdef readonly str resume_call
    cdef readonly str call_waiting
    cdef readonly str call_completed
    cdef readonly str wait_io
    cdef readonly str wait_subcall
    cdef readonly str default_entry

    cdef object _wait_resume(self, dict envelope, object accept)
    cdef object _execute(self, dict envelope, object accept)
    cdef object _completed(self, dict envelope, object accept)
