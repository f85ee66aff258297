"""attack_signal(pid): send SIGTERM to a process (the Worker)."""
import os
import signal


def main(pid):
    os.kill(pid, signal.SIGTERM)
    return "signalled"
