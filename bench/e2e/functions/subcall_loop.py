"""subcall_loop(n, tag) -> sum of add(tag, i) for i < n, one sequential subcall each.

The (tag, i) pairs differ across a task's parents, so the task's call cache
never answers: every sdk.call is a real subcall dispatched by the Worker."""

from blockx_executor import sdk


def main(n, tag=0):
    return sum(sdk.call("add", tag, i) for i in range(n))
