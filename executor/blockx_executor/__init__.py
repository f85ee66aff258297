"""The BlockX Python Executor: runs user function calls for one Worker over a
Unix socket (`python -m blockx_executor --help`).

User function files import the SDK as `from blockx_executor import sdk`; this
package init stays empty so that import pulls in nothing but the SDK itself."""

__all__ = ["sdk"]
