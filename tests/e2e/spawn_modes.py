"""The executor spawn modes an e2e suite runs in (both). The sandbox
needs bubblewrap (`make bubblewrap`; `make test` installs it): without it the
sandbox cases fail rather than skip, as CI must run them."""
SPAWN_MODES = ("process", "sandbox")
