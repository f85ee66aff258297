"""sf_parent(mark, path, marks, fail): write `mark`, then ask for
sf_once(path, marks, fail) as a subcall; return its output, or the subcall's
error kind and message when it failed."""
from blockx_executor import sdk


def main(mark, path, marks, fail=False):
    with open(mark, "w") as f:
        f.write("asked")
    try:
        return {"out": sdk.call("sf_once", path, marks, fail)}
    except sdk.SubcallError as exc:
        return {"error": exc.child_error_kind, "message": str(exc)}
