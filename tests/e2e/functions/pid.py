import os


def main(*_):
    return os.getpid()
