"""add1(x) -> x + 1."""


def main(x):
    return x + 1
