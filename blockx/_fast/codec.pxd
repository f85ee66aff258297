cimport cython


@cython.final
cdef class FrameDecoder:
    cdef int _state                 # _IDLE / _PREFIX / _HDR / _BODY / _STREAM (codec.pyx)
    cdef unsigned char _hdr[12]     # length prefix + the first (up to) 8 body bytes
    cdef Py_ssize_t _got            # bytes of the pending frame received, prefix included
    cdef Py_ssize_t _n              # body length of the pending frame
    cdef Py_ssize_t _jl             # JSON length of a streamed BXB1 frame
    cdef bytes _body                # pending body (generic path), filled in place
    cdef bytes _json                # streamed BXB1 frame: JSON part, filled in place
    cdef bytes _side                # streamed BXB1 frame: sidecar, filled in place
    cdef object _error              # the FrameError that failed this decoder, or None

    cdef int _feed(self, const unsigned char* p, Py_ssize_t size, list out) except -1
    cdef Py_ssize_t _advance(self, const unsigned char* p, Py_ssize_t avail,
                             list out) except -1
    cdef int _reset(self) except -1
