import pytest

from .fake_worker import FakeWorker


@pytest.fixture
def make_worker():
    """make_worker(functions, **opts) -> a FakeWorker with a live executor attached;
    every one is shut down (socket closed, process reaped) after the test."""
    made = []

    def make(functions=None, **opts):
        w = FakeWorker(functions, **opts)
        made.append(w)
        return w

    yield make
    for w in made:
        w.shutdown()
