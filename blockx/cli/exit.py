"""How every `blockx` command ends: its exit codes, and CLIError for bad input.

0 ok, 1 an RPC or input error ("error: CODE: message" or "error: message" on
stderr), 2 bad usage or configuration, 3 a task reached FAILED, 130 interrupted.
A script can thus tell a failed task from a worker it could not reach."""

from __future__ import annotations

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_TASK_FAILED = 3
EXIT_INTERRUPTED = 130


class CLIError(Exception):
    """Bad input to a client command: printed as `error: <message>`, exit 1."""
