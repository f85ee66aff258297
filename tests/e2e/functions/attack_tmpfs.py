"""attack_tmpfs(mb): fill the private /tmp (memory-backed) with mb MiB."""


def main(mb):
    chunk = b"x" * (16 * 1024 * 1024)
    with open("/tmp/fill", "wb") as f:
        for _ in range(mb // 16):
            f.write(chunk)
            f.flush()
    return mb
