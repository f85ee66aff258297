"""IO errors a call can see. Each carries the errorKind / retryable pair that the
Worker puts into the ResumeCall error, so user code gets a catchable failure and the
dispatcher knows whether retrying the call can help."""

from __future__ import annotations

IO_ERROR = "IO_ERROR"


class TaskIOError(Exception):
    """Base of every IO failure served back to a waiting call."""

    error_kind = IO_ERROR

    def __init__(self, message: str, *, retryable: bool = False):
        super().__init__(message)
        self.message = message
        self.retryable = retryable

    def to_resume_error(self) -> dict:
        """The `error` object of ResumeCall(resumeKind=io)."""
        return {"errorKind": self.error_kind, "errorMessage": self.message, "retryable": self.retryable}


class IOBackendError(TaskIOError):
    """The backend refused or failed the request."""


class UnknownIOBackend(TaskIOError):
    """The call named a backend this Worker does not serve."""


class IOScopeClosed(TaskIOError):
    """The task ended (or the Worker is shutting down) while the request was pending."""


RPC_ERROR = "RPC_ERROR"


class RpcCallError(TaskIOError):
    """A JSON-RPC node answered the request with an error object: its code,
    message and optional data reach the call (the SDK raises RpcError)."""

    error_kind = RPC_ERROR

    def __init__(self, message: str, *, code: int, rpc_message: str, data=None):
        super().__init__(message, retryable=False)
        self.code = code
        self.rpc_message = rpc_message
        self.data = data

    def to_resume_error(self) -> dict:
        error = super().to_resume_error()
        rpc = {"code": self.code, "message": self.rpc_message}
        if self.data is not None:
            rpc["data"] = self.data
        error["rpcError"] = rpc
        return error
