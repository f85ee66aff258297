"""The Worker's state directory (STATE_DIR) and the private files in it.

STATE_DIR holds what no other local user may read or replace: the default
`local` DuckDB file, the bundle root by default, credentials the Worker writes
for its own clients. The Worker creates the directory at start with mode 0700
exactly (whatever the umask; missing parents get the usual mode), before anything
is written into it. A directory that already exists is not changed (it may be
shared on purpose); one that group or others can enter is reported once, with
the command that closes it. Files the Worker creates there are 0600 (the
DuckDB file: blockx.plugins.data.duck)."""

from __future__ import annotations

import os
import stat

STATE_DIR_MODE = 0o700


def ensure_state_dir(path: str) -> str | None:
    """Create ``path`` with mode 0700 when missing. Returns a warning to log when it
    exists with group or other access, else None. OSError when it cannot be made."""
    try:
        os.makedirs(path, mode=STATE_DIR_MODE)
    except FileExistsError:
        pass
    else:
        os.chmod(path, STATE_DIR_MODE)      # makedirs applied the umask; make the mode exact
        return None
    st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(f"STATE_DIR {path!r} exists and is not a directory")
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        return (f"STATE_DIR {path!r} has mode {mode:04o}: other local users can enter it; "
                f"`chmod 700 {path}` keeps its data files private")
    return None
