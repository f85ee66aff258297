"""attack_read(path): read a file (a secret beside the Worker)."""


def main(path):
    with open(path) as f:
        return f.read()
