"""Sources of the user functions the executor tests run."""

ADD = "def main(a, b):\n    return a + b\n"

IO_JSON = '''from blockx_executor import sdk

def main(x):
    got = sdk.io("devstub", {"op": "echo", "x": x})
    return {"got": got}
'''

IO_BINARY = '''from blockx_executor import sdk

def main(key_hex):
    result, body = sdk.io_bytes("blockdb", {"op": "get"}, body=bytes.fromhex(key_hex))
    return {"result": result, "body": body.hex() if body is not None else None}
'''

IO_CATCH = '''from blockx_executor import sdk

def main():
    try:
        sdk.io("devstub", {"op": "fail"})
    except sdk.IOCallError as exc:
        return {"caught": exc.error_kind, "retryable": exc.retryable}
    return "no error"
'''

SUBCALL = '''from blockx_executor import sdk

def main(n):
    return sdk.call("add", n, 1) * 10
'''

SLEEP = '''from blockx_executor import sdk

def main(ms):
    sdk.sleep(ms)
    return "woke"
'''

SPIN = '''import time

def main(ms):
    end = time.monotonic() + ms / 1000.0
    n = 0
    while time.monotonic() < end:
        n += 1
    return "spun"
'''

FAIL = '''def helper(x):
    secret = "s3cr3t"
    big = "y" * 1000
    items = list(range(1000))
    raise ValueError(f"bad x: {x}")

def main(x):
    outer = "not innermost"
    return helper(x)
'''

MANY_LOCALS = "def main():\n" + "".join(f"    v{i} = {i}\n" for i in range(30)) + \
    "    raise RuntimeError('many')\n"

RETRYABLE = '''class Flaky(Exception):
    retryable = True

def main():
    raise Flaky("try again")
'''

NOT_JSON = "def main():\n    return {1, 2, 3}\n"

OTHER_ENTRY = "def other(x):\n    return x * 2\n"

SYNTAX_ERROR = "def main(:\n    return 1\n"

COUNTER = '''calls = 0

def main():
    global calls
    calls += 1
    return calls
'''

SDK_OUTSIDE = '''from blockx_executor import sdk
import threading

def main():
    errors = []
    def run():
        try:
            sdk.sleep(1)
        except RuntimeError as exc:
            errors.append(str(exc))
    t = threading.Thread(target=run)
    t.start()
    t.join()
    return errors
'''

SWALLOW_CANCEL = '''from blockx_executor import sdk

def main():
    try:
        sdk.io("devstub", {"op": "slow"})
    except Exception:
        return "swallowed"
    return "answered"
'''

INT_KEYS = "def main():\n    return {1: 'a', 2: [1.5, None, True]}\n"

CONTEXTVAR = '''import contextvars

var = contextvars.ContextVar("var", default="unset")

def main(value):
    before = var.get()
    var.set(value)
    return before
'''

BAD_SLEEP = '''from blockx_executor import sdk

def main():
    sdk.sleep(float("inf"))
'''

SPIN_SWALLOW = '''import time

def main(ms):
    end = time.monotonic() + ms / 1000.0
    caught = 0
    while time.monotonic() < end:
        try:
            while time.monotonic() < end:
                pass
        except BaseException:
            caught += 1
    return caught
'''

BOM = "\ufeffdef main():\n    return 'bom ok'\n"

HOSTILE = '''class Bad:
    def __repr__(self):
        raise RuntimeError("no repr")

class Weird(Exception):
    def __str__(self):
        raise RuntimeError("no str")

def main():
    thing = Bad()
    raise Weird()
'''

WORK_THEN_IO = '''from blockx_executor import sdk

def main(x):
    total = sum(range(1000))
    got = sdk.io("devstub", {"op": "echo", "x": x})
    return [total, got]
'''

WORK_THEN_CALL = '''from blockx_executor import sdk

def main(n):
    doubled = n * 2
    return sdk.call("add", doubled, 1)
'''

RAISE_BEFORE_IO = '''from blockx_executor import sdk

def main(x):
    if x:
        raise KeyError(f"before suspending: {x}")
    return sdk.io("devstub", {"op": "echo"})
'''

RAISE_AFTER_IO = '''from blockx_executor import sdk

def main(x):
    got = sdk.io("devstub", {"op": "echo", "x": x})
    raise RuntimeError(f"after resuming with {got!r}")
'''
