"""How every `blockx` command ends: its exit codes, and the two errors a command
raises for them, CLIError and UsageError.

0 ok; 1 the worker (or etcd, Redis) refused, could not be reached, or a local
step failed ("error: CODE: message" or "error: message" on stderr); 2 bad usage
or configuration: the command line itself is wrong (a flag, a malformed --calls,
--payload or --task-json, a file it names that cannot be read), and nothing was
sent; 3 a task reached FAILED; 130 interrupted. A script can thus tell a
mistake in its own command line from a worker it could not reach, and both
from a task that failed."""

from __future__ import annotations

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_TASK_FAILED = 3
EXIT_INTERRUPTED = 130


class CLIError(Exception):
    """A client command could not do its job: printed as `error: <message>`, exit 1."""

    exit_code = EXIT_ERROR


class UsageError(CLIError):
    """The command line is wrong (a flag, or input it names): `error: <message>`, exit 2.
    A CLIError too, so code that catches CLIError keeps catching it."""

    exit_code = EXIT_USAGE
