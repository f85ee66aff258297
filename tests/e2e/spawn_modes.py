"""The executor spawn modes an e2e suite runs in. The sandbox
needs bubblewrap (`make bubblewrap`), the oci sandbox runc (`make runc`); `make
test` installs both: without them the sandbox cases fail rather than skip, as
CI must run them. "sandbox" is the bubblewrap runtime, "sandbox-oci" the runc
one (EXECUTOR_SANDBOX_RUNTIME=oci)."""
SPAWN_MODES = ("process", "sandbox", "sandbox-oci")


def spawn_env(mode: str) -> dict[str, str]:
    """The Worker settings of a spawn mode of SPAWN_MODES."""
    if mode == "sandbox-oci":
        return {"EXECUTOR_SPAWN_MODE": "sandbox", "EXECUTOR_SANDBOX_RUNTIME": "oci"}
    return {"EXECUTOR_SPAWN_MODE": mode}
