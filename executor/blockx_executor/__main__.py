"""`python -m blockx_executor ...`: see blockx_executor.cli."""

import os
import sys

from blockx_executor.cli import main

if __name__ == "__main__":
    code = main()
    # Skip interpreter teardown: it would throw GreenletExit into the greenlets of
    # abandoned calls and run their user code with no Worker to talk to.
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code)
