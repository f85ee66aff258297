def main(n):
    return "x" * n
