import pytest_asyncio

from .harness import build


@pytest_asyncio.fixture
async def make_harness(tmp_path):
    """make_harness(**build_options) -> Harness; every one is closed after the test."""
    made = []

    async def make(**kw):
        h = await build(tmp_path, **kw)
        made.append(h)
        return h

    yield make
    for h in made:
        await h.close()
