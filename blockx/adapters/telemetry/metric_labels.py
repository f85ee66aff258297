"""Bounded metric label values: what an executor or a task may put in a label.

Every distinct label value is a new Prometheus series, kept by every scrape and
every dashboard query for the retention period. Some label values come from
outside the Worker's own code: an executor names itself in its Heartbeat
(``executor``), user code chooses its ``error_kind`` (``SDKError(...,
error_kind=...)``), a plugin or a core names a task's ``failure_code``. A
hostile or merely careless function could mint one value per call. So each such
label goes through a `LabelValues`:

- a value is kept only if it is at most `MAX_LABEL_LENGTH` characters of
  ``[A-Za-z0-9_.:/-]`` (empty allowed: a succeeded task has no failure code);
  anything else (control characters, spaces, quotes, non-ASCII, a megabyte of
  text) is counted as `OTHER`;
- the values the Worker itself produces (``known``) are always kept; beyond them
  at most ``max_values`` distinct values are kept, first come first served, and
  every later new value is counted as `OTHER`.

So a label has at most ``len(known) + max_values + 1`` series whatever the
executors send, and the counters behind it (plain dicts bumped on the hot path)
stay as small. The check runs when a value is counted; a value already admitted
costs one set lookup."""

from __future__ import annotations

from collections.abc import Iterable

OTHER = "other"
MAX_LABEL_LENGTH = 64
DEFAULT_MAX_VALUES = 64
_ALLOWED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.:/-")


def valid_label_value(value: object, allowed: frozenset[str] = _ALLOWED) -> bool:
    """True when ``value`` is a str of at most MAX_LABEL_LENGTH ``allowed`` characters."""
    return (type(value) is str and len(value) <= MAX_LABEL_LENGTH
            and (not value or allowed.issuperset(value)))


class LabelValues:
    """The values one label may take (see the module docstring)."""

    __slots__ = ("label", "max_values", "_allowed", "_known", "_admitted", "_extra")

    def __init__(self, label: str, known: Iterable[str] = (), max_values: int = DEFAULT_MAX_VALUES,
                 extra_chars: str = "") -> None:
        """``extra_chars``: characters this label allows beyond the common set (an
        identity's ``@`` and ``=``, as in ``ops@acme`` or ``CN=alice``)."""
        if max_values < 0:
            raise ValueError(f"label {label!r}: max_values must be >= 0, got {max_values}")
        self.label = label
        self.max_values = max_values
        self._allowed = _ALLOWED | frozenset(extra_chars)
        self._known = frozenset(v for v in known if valid_label_value(v, self._allowed)) | {OTHER}
        self._admitted: set[str] = set(self._known)
        self._extra = 0

    def __call__(self, value: object) -> str:
        """``value`` itself when it may be a label value, else OTHER."""
        if type(value) is str and value in self._admitted:     # the common case: one set lookup
            return value
        if not valid_label_value(value, self._allowed) or self._extra >= self.max_values:
            return OTHER
        self._extra += 1
        self._admitted.add(value)            # type: ignore[arg-type]
        return value                         # type: ignore[return-value]

    def admitted(self) -> frozenset[str]:
        """Every value this label can currently show (known, admitted and OTHER)."""
        return frozenset(self._admitted)
