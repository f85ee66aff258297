"""deep(n): recursion through subcalls, n levels deep."""
from blockx_executor import sdk


def main(n):
    if n <= 0:
        return 0
    return 1 + sdk.call("deep", n - 1)
