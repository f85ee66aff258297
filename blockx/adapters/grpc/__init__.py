"""The gRPC side of the Worker: WorkerService's server (server.py) and what only
it uses: its bounds, the call gate, request decoding, the open-stream counts,
the TaskSession stream, the CancelTask and ListTasks wire forms, and the
conversion between the public protobuf messages and the core's values (wire.py,
result pages). Nothing is re-exported here."""
