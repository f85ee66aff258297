"""Function code by digest: verified source, compiled code, the executed module.

ExecuteCall names code only by `functionCodeDigest` (sha256 hex of the source);
the executor fetches the source once per digest (CallWaiting function_code),
checks that sha256(source) really is the digest, and keeps it. The module is
executed on the first call that needs it, inside that call's greenlet (so module
code may use the SDK and its errors are that call's USER_ERROR), and is then
reused by every later call with the same digest: module-level state behaves as
in a warm serverless runtime. A failed compile or module run caches nothing
but the source, so the next call reports the same error afresh.

The cache is LRU-bounded by digest count; an evicted digest is fetched again
when next needed. Each module is registered in sys.modules under a name unique
to its digest (so pickle / dataclasses find it) and its source in linecache (so
tracebacks show the user's lines); eviction removes both."""

from __future__ import annotations

import hashlib
import linecache
import re
import sys
import types
from collections import OrderedDict

from .failure import USER_FILE_PREFIX


class FunctionNotFound(Exception):
    """The code for a call cannot be had, or has no such entry point."""

    error_kind = "FUNCTION_NOT_FOUND"
    retryable = False


def normalize_digest(digest: str) -> str:
    digest = digest.strip().lower()
    return digest[7:] if digest.startswith("sha256:") else digest


def source_digest(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8")).hexdigest()


class FunctionCode:
    __slots__ = ("function_id", "digest", "source", "filename", "module_name", "code", "module")

    def __init__(self, function_id: str, digest: str, source: str):
        self.function_id = function_id
        self.digest = digest
        self.source = source
        self.filename = f"{USER_FILE_PREFIX}{function_id}@{digest[:12]}>"
        safe_id = re.sub(r"\W", "_", function_id)[:60]
        self.module_name = f"blockx_fn_{safe_id}_{digest[:16]}"
        self.code: types.CodeType | None = None
        self.module: types.ModuleType | None = None

    def load_module(self) -> types.ModuleType:
        """The executed module (compile and run it on first use). Raises whatever
        compiling / running the user's module raises."""
        module = self.module
        if module is not None:
            return module
        if self.code is None:
            linecache.cache[self.filename] = (
                len(self.source), None, self.source.splitlines(True), self.filename)
            # The digest covers the file bytes; a UTF-8 BOM is not Python syntax.
            self.code = compile(self.source.removeprefix("\ufeff"), self.filename, "exec",
                                dont_inherit=True)
        module = types.ModuleType(self.module_name)
        module.__file__ = self.filename
        module.__dict__["__blockx_function_id__"] = self.function_id
        module.__dict__["__blockx_digest__"] = self.digest
        sys.modules[self.module_name] = module
        try:
            exec(self.code, module.__dict__)
        except BaseException:
            if sys.modules.get(self.module_name) is module:
                del sys.modules[self.module_name]
            raise
        self.module = module
        return module

    def entry(self, selector: str):
        """The callable named by `selector` ("main", or a dotted path such as
        "Handler.run"). Runs the module first if needed."""
        module = self.module
        if module is not None and selector and "." not in selector:
            # The hot case (a loaded module, a plain name): what the loop below
            # would find, without splitting the path; anything else takes the loop.
            obj = getattr(module, selector, None)
            if obj is not None and callable(obj):
                return obj
        obj = self.load_module()
        path = selector or "main"
        for part in path.split("."):
            try:
                obj = getattr(obj, part)
            except AttributeError:
                raise FunctionNotFound(
                    f"function {self.function_id!r} (digest {self.digest[:12]}) has no "
                    f"entry point {path!r}") from None
        if not callable(obj):
            raise FunctionNotFound(
                f"entry point {path!r} of function {self.function_id!r} is a "
                f"{type(obj).__name__}, not a callable")
        return obj

    def forget(self) -> None:
        if sys.modules.get(self.module_name) is self.module and self.module is not None:
            del sys.modules[self.module_name]
        linecache.cache.pop(self.filename, None)
        self.module = None
        self.code = None


class CodeCache:
    def __init__(self, capacity: int = 256):
        if capacity < 1:
            raise ValueError("code cache capacity must be >= 1")
        self.capacity = capacity
        self._by_digest: OrderedDict[str, FunctionCode] = OrderedDict()

    def __len__(self) -> int:
        return len(self._by_digest)

    def get(self, digest: str) -> FunctionCode | None:
        fc = self._by_digest.get(digest)
        if fc is not None:
            self._by_digest.move_to_end(digest)
        return fc

    def add(self, function_id: str, digest: str, source: str, sent_digest: str) -> FunctionCode:
        """Store verified source for `digest` (already normalized); `sent_digest`
        is the digest the Worker's answer claims. Raises FunctionNotFound when the
        answer is for other code."""
        claimed = normalize_digest(sent_digest)
        if claimed != digest:
            raise FunctionNotFound(
                f"function code for {function_id!r}: asked for digest {digest}, "
                f"the worker answered with code for digest {claimed or '(none)'}")
        actual = source_digest(source)
        if actual != digest:
            raise FunctionNotFound(
                f"function code for {function_id!r} does not match its digest: expected "
                f"sha256 {digest}, the source received hashes to {actual}")
        fc = self._by_digest.get(digest)
        if fc is None:
            fc = FunctionCode(function_id, digest, source)
            self._by_digest[digest] = fc
            while len(self._by_digest) > self.capacity:
                _, old = self._by_digest.popitem(last=False)
                old.forget()
        else:
            self._by_digest.move_to_end(digest)
        return fc
