"""square(x) -> x * x (the leaf of sum_squares)."""


def main(x):
    return x * x
