import uvloop


def pytest_asyncio_loop_factories(config, item):
    # Every async test runs on uvloop, as the Worker does.
    return {"uvloop": uvloop.new_event_loop}
