"""fail(message="boom") always raises: the call fails with USER_ERROR (not
retryable), and the task with CALL_FAILED under the FAST_FAIL policy."""


def main(message="boom"):
    raise RuntimeError(message)
