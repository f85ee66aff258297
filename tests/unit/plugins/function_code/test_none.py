"""The Function Code View of a production Worker with no function source: every
function id fails FUNCTION_NOT_FOUND, saying how to configure one."""
import pytest

from blockx.plugins.function_code.none import FunctionCodeNone
from blockx.plugins.function_code.view import FunctionNotFound


def test_no_function_is_served_and_the_message_says_how_to_configure_one():
    code = FunctionCodeNone(10_000, now_ms=5)
    epoch = code.current_epoch(100)
    assert epoch == 1 and code.refresh(200) == 1 and code.retained_epochs() == [1]
    view = code.pin(epoch, 300)
    assert view.function_ids() == []
    with pytest.raises(FunctionNotFound) as ei:
        view.resolve("sql_query")
    assert str(ei.value) == ("function 'sql_query' not found in code epoch 1 [server only: no function source is "
                             "configured: set FUNCTIONS_DIR to a directory of <functionId>.py files, or "
                             "FUNCTIONS_SOURCE=etcd or redis; known: none]")
    assert ei.value.error_kind == "FUNCTION_NOT_FOUND"
    with pytest.raises(FunctionNotFound):
        code.source_for("0" * 64)
