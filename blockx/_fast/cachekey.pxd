from libc.stdint cimport uint8_t, uint64_t


cdef int murmur3_x64_128(const uint8_t* data, Py_ssize_t n, uint64_t seed,
                         uint64_t* out) except -1

cdef bytes cache_key_c(str function_id, str digest, bytes args_json)
