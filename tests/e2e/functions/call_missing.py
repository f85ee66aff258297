"""call_missing(): ask for a subcall of a function that does not exist."""
from blockx_executor import sdk


def main():
    return sdk.call("no_such_function")
