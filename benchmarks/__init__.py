"""toolbus's benchmark suite: `python -m benchmarks` (see docs/performance.md)."""
