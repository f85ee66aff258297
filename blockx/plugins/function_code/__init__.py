"""The Function Code View: where the Worker's function code comes from
(FUNCTIONS_SOURCE: a directory, etcd, Redis, or none), and what a task pins of
it (view.py). One module a source; nothing is re-exported here."""
