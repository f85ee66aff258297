"""TLS settings of an outbound gRPC channel (ClientTLS: CA, client certificate and
key, from code or BLOCKX_TLS_*): what the client library and the Worker's own
outbound channels (etcd, shadow traffic) both use, below both, so neither imports
the other for it. The Worker's listening side is blockx.adapters.tls."""
