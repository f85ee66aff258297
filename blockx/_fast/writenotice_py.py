"""WrittenLog and Notice: the callback form of a ResumeCall's waiter (pure-Python
twin of writenotice.pyx; the behaviour must match it exactly, the parity tests
run both).

Outbox.enqueue_notify(frame, waiter) tells a waiter once its frame was handed to
the transport (set_result) or the outbox closed first (set_exception). The
dispatch actor sends a ResumeCall per subcall and per IO round trip, and needs
to know only which of them were written, all at once, once per flush. A Notice
is that waiter, cheap to make: written, it adds its key to its WrittenLog, and
the first key since the owner last took them calls ``on_first()`` (the owner
schedules one pass over all of them); not written, it calls
``on_lost(executor_id, key, attempt_seq, exc)``. A Notice answers once: the
outbox asks done() first, as it does of a Future."""

from __future__ import annotations


class WrittenLog:
    __slots__ = ("keys", "_on_first", "_on_lost")

    def __init__(self, on_first, on_lost) -> None:
        self.keys: list = []
        self._on_first = on_first
        self._on_lost = on_lost

    def take(self) -> list:
        """The keys written since the last take(), oldest first; the log starts over."""
        keys = self.keys
        self.keys = []
        return keys

    def __len__(self) -> int:
        return len(self.keys)


class Notice:
    __slots__ = ("_log", "key", "executor_id", "attempt_seq", "_done")

    def __init__(self, log: WrittenLog, key, executor_id, attempt_seq) -> None:
        if type(log) is not WrittenLog:
            raise TypeError(f"Notice needs a WrittenLog, not {type(log).__name__}")
        self._log = log
        self.key = key
        self.executor_id = executor_id
        self.attempt_seq = attempt_seq
        self._done = False

    def done(self) -> bool:
        return self._done

    def set_result(self, _value) -> None:
        if self._done:
            raise RuntimeError(f"Notice {self.key!r} was already answered")
        self._done = True
        log = self._log
        log.keys.append(self.key)
        if len(log.keys) == 1:
            log._on_first()

    def set_exception(self, exc: BaseException) -> None:
        if self._done:
            raise RuntimeError(f"Notice {self.key!r} was already answered")
        self._done = True
        self._log._on_lost(self.executor_id, self.key, self.attempt_seq, exc)
