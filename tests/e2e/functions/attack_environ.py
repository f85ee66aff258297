"""attack_environ(pid): read another process's environment through /proc."""


def main(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError as exc:
        return f"{type(exc).__name__}: {exc.strerror}"
