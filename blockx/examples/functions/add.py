"""add(a, b) -> a + b.

    blockx submit --calls 'add:1,2'"""


def main(a, b):
    return a + b
