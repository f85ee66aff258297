"""IO backends and the per-task IO scope."""

from blockx.plugins.io.backend import IOBackend
from blockx.plugins.io.devstub import DevStubBackend
from blockx.plugins.io.errors import IOBackendError, IOScopeClosed, TaskIOError, UnknownIOBackend
from blockx.plugins.io.scope import IOScopeFactory, TaskIOScope

__all__ = ["IOBackend", "DevStubBackend", "IOBackendError", "IOScopeClosed", "TaskIOError",
           "UnknownIOBackend", "IOScopeFactory", "TaskIOScope"]
