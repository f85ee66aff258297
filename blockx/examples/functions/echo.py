"""echo(x) -> x; with several arguments, the list of them. Pairs with the `payload`
builder, which calls a function with the whole payload object."""


def main(*args):
    return args[0] if len(args) == 1 else list(args)
