import uvloop

from tests.support.postgres import postgres_fixture

# One throwaway PostgreSQL cluster for the whole run, started by the first test that
# asks for it (the data-plane suites).
postgres_server = postgres_fixture(scope="session")


def pytest_asyncio_loop_factories(config, item):
    # Every async test runs on uvloop, as the Worker does.
    return {"uvloop": uvloop.new_event_loop}
