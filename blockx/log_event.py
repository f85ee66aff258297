"""log_event: the one way every layer (the app, the adapters, the plugins) writes
a named event with structured fields, `log_event(log, "task_finished", taskId=...)`.
It needs only the standard logging module; how the line is written (one JSON
object per line, the event under `event`, the fields at the top level) is
blockx.app.logs', which the app installs at start."""

from __future__ import annotations

import logging
from typing import Any


def log_event(logger: logging.Logger, event: str, level: int = logging.INFO,
              exc_info: Any = None, **fields: Any) -> None:
    """Log a named event with structured fields: `log_event(log, "task_finished", taskId=...)`."""
    if logger.isEnabledFor(level):
        logger.log(level, event, exc_info=exc_info, extra={"event": event, "fields": fields})
