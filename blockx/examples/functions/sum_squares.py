"""sum_squares(n) -> 0^2 + 1^2 + ... + (n-1)^2, computed with one `square` subcall
per term: each subcall is dispatched by the Worker like any call (maybe to another
executor), while this call waits without blocking its executor.

    blockx submit --calls 'sum_squares:10'    # -> 285"""

from blockx_executor import sdk


def main(n):
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"sum_squares needs a non-negative integer, got {n!r}")
    return sum(sdk.call("square", i) for i in range(n))
