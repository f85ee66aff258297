"""End-to-end load benchmark: `make bench` or `.venv/bin/python bench/e2e_load.py [--quick] [--only a,b]`.
See bench/e2e/main.py for what each scenario measures."""
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.e2e.main import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
