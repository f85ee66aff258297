"""spin_forever() never returns and never yields: `while True: pass`."""


def main():
    while True:
        pass
