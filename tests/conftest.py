import asyncio

import pytest
import uvloop


@pytest.fixture(scope="session")
def event_loop_policy():
    # Every async test runs on uvloop, as the Worker does.
    return uvloop.EventLoopPolicy()
