"""over_quota(n): fail with the error kind QUOTA, as a quota-checking function would."""
from blockx_executor import sdk


def main(n):
    used = n * 10
    raise sdk.SDKError(f"over quota: {used} of 5 units", error_kind="QUOTA")
