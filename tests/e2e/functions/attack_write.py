"""attack_write(path): create a file and write to it."""


def main(path):
    with open(path, "w") as f:
        f.write("pwned")
    return path
