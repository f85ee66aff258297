# The C entry point of the cache key, for other compiled modules (the dispatch
# loop builds a key per call); its arguments are already exact str / str / bytes.
cdef bytes cache_key_c(str function_id, str digest, bytes args_json)
