"""This Worker beside Ray on trivial one-call jobs: `make bench-peers` or
`.venv/bin/python bench/bench_peers.py [--rounds N] [--no-ray]`. See bench/peers/main.py."""
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.peers.main import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
