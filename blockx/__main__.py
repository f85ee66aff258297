"""`python -m blockx ...` is the `blockx` command."""
from blockx.cli import main

raise SystemExit(main())
