"""quota_kind(n): what a parent sees of a subcall that failed with QUOTA."""
from blockx_executor import sdk


def main(n):
    try:
        sdk.call("over_quota", n)
    except sdk.SubcallError as exc:
        return {"errorKind": exc.error_kind, "childErrorKind": exc.child_error_kind, "message": str(exc)}
    return "no error"
