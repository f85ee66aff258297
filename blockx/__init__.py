"""BlockX Worker: a task-execution node with a pool of Python executor processes."""

__version__ = "0.1.0"
