"""fail_kind(kind): fail the call with the errorKind `kind`, whatever string it is."""
from blockx_executor import sdk


def main(kind):
    raise sdk.SDKError("failed with a kind of its choosing", error_kind=kind)
