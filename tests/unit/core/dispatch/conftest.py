"""While the dispatcher suite runs interpreted with BLOCKX_TRANSITIONS_OUT set
(test_state_transitions runs it so), the records' setter notes every state
change the suite makes, and the set is written to that file at the end."""
import json
import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def _note_state_transitions():
    out = os.environ.get("BLOCKX_TRANSITIONS_OUT")
    if not out:
        yield
        return
    from blockx.core.dispatch import records
    records.record_transitions(True)
    yield
    seen = records.record_transitions(False)
    with open(out, "w") as f:
        json.dump(sorted(seen), f)
