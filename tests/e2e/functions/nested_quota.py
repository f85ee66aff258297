"""nested_quota(n): call over_quota as a subcall; its failure fails this call too."""
from blockx_executor import sdk


def main(n):
    password = "hunter2"
    budget = {"units": 5}
    return sdk.call("over_quota", n + len(password) - len(password) + len(budget) - 1)
