"""WorkerService's method handlers with requests that may not decode.

grpc answers a request its deserializer cannot parse (invalid UTF-8 in a string
field, a corrupt wire format) with UNKNOWN "Unexpected DecodeError", a code the
API does not define. Here each request type decodes into its message, or into an
``Undecodable`` that says why; the handlers answer it INVALID_ARGUMENT
(``refusal``), and a TaskSession that receives one ends INVALID_ARGUMENT. The
handlers are the generated code's, only the deserializers differ.
"""
from __future__ import annotations

import grpc
from google.protobuf.message import DecodeError

from blockx.worker.v1 import worker_pb2 as pb

_SERVICE = pb.DESCRIPTOR.services_by_name["WorkerService"]


class Undecodable:
    """A request of ``type_name`` that does not parse: ``error`` says why."""
    __slots__ = ("type_name", "error")

    def __init__(self, type_name: str, error: str) -> None:
        self.type_name = type_name
        self.error = error

    def refusal(self) -> str:
        return (f"the request is not a valid {self.type_name} message ({self.error}); "
                "string fields must be valid UTF-8. Nothing was done")


def _decoder(cls):
    parse = cls.FromString
    name = cls.DESCRIPTOR.full_name

    def decode(raw: bytes):
        try:
            return parse(raw)
        except DecodeError as exc:
            return Undecodable(name, str(exc)[-200:])
    return decode


_KINDS = {(False, False): grpc.unary_unary_rpc_method_handler,
          (False, True): grpc.unary_stream_rpc_method_handler,
          (True, False): grpc.stream_unary_rpc_method_handler,
          (True, True): grpc.stream_stream_rpc_method_handler}


def add_worker_service(servicer, server) -> None:
    """Register ``servicer``'s WorkerService methods on ``server``."""
    handlers = {}
    for m in _SERVICE.methods:
        req = getattr(pb, m.input_type.name)
        resp = getattr(pb, m.output_type.name)
        kind = _KINDS[(m.client_streaming, m.server_streaming)]
        handlers[m.name] = kind(getattr(servicer, m.name), request_deserializer=_decoder(req),
                                response_serializer=resp.SerializeToString)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(_SERVICE.full_name, handlers),))
    server.add_registered_method_handlers(_SERVICE.full_name, handlers)
