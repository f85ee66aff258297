"""Cache-key hashing: cache_key(function_id, digest, args_json) for small
args (a typical call) and 10 KiB args."""

from time import perf_counter

from bench.micro import fast_pair, fast_requires, register

FID = "transfer_summary"
DIGEST = "3f0a5c1e9b7d2a4c6e8f01234567890abcdef0123456789abcdef0123456789a"


def _setup(args_json):
    def setup():
        cy, py = fast_pair("cachekey")
        assert cy.cache_key(FID, DIGEST, args_json) == py.cache_key(FID, DIGEST, args_json)
        return {"cython": cy.cache_key, "python": py.cache_key}
    return setup


def _run(label, args_json):
    def run(state, loops):
        key = state[label]
        t0 = perf_counter()
        for _ in range(loops):
            key(FID, DIGEST, args_json)
        return perf_counter() - t0
    return run


SMALL = b'["0xabc123",17,{"limit":100}]'
LARGE = (b'["' + b"x" * (10 * 1024 - 4) + b'"]')
assert len(LARGE) == 10 * 1024

for _name, _args in (("small args", SMALL), ("10 KiB args", LARGE)):
    register(f"cachekey {_name}", _setup(_args), _run("cython", _args), _run("python", _args),
             requires=fast_requires("cachekey"))
