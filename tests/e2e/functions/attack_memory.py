"""attack_memory(mb): hold mb MiB of memory, 16 MiB at a time."""


def main(mb):
    chunks = [bytearray(16 * 1024 * 1024) for _ in range(mb // 16)]
    return sum(len(c) for c in chunks) // (1024 * 1024)
