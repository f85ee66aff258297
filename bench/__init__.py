"""Benchmarks: `python -m bench.micro` (pyperf microbenchmarks of the compiled
hot paths against their pure-Python twins) and the end-to-end load benchmark.
Figures are relative: the machines are shared and noisy."""
