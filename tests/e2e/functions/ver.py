VERSION = 1


def main():
    return VERSION
