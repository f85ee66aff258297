"""The Worker's state directory (STATE_DIR) and the private files in it.

STATE_DIR holds what no other local user may read or replace: the default
`local` DuckDB file, the bundle root by default, credentials the Worker writes
for its own clients (the admin token: blockx.adapters.auth_tokens). The Worker
creates the directory at start with mode 0700 exactly (whatever the umask;
missing parents get the usual mode), before anything is written into it.
Whether it is new or not, it is opened without following a link and checked on
the open descriptor (blockx.adapters.private_dir), at the moment of use rather
than when the config was read: a directory another user owns, one group or
others can write into, or a symbolic link is refused (UnsafePath), since
another local user may have created it first. One that is the Worker's own but
that group or others can enter is not changed (it may be shared on purpose) and
is reported once, with the command that closes it. Files the Worker creates
there are 0600 (the DuckDB file: blockx.plugins.data.duck)."""

from __future__ import annotations

import os
import stat

from blockx.adapters.private_dir import DIR_MODE, UnsafePath, open_private_dir

STATE_DIR_MODE = DIR_MODE
__all__ = ["STATE_DIR_MODE", "UnsafePath", "ensure_state_dir"]


def ensure_state_dir(path: str) -> str | None:
    """Create ``path`` with mode 0700 when missing, and check the directory opened.
    Returns a warning to log when group or others can enter it, else None.
    UnsafePath when another user owns it, others can write into it or it is a link;
    another OSError when it cannot be made."""
    fd, created = open_private_dir(path, "STATE_DIR")
    try:
        mode = stat.S_IMODE(os.fstat(fd).st_mode)
    finally:
        os.close(fd)
    if not created and mode & 0o077:
        return (f"STATE_DIR {path!r} has mode {mode:04o}: other local users can enter it; "
                f"`chmod 700 {path}` keeps its data files private")
    return None
