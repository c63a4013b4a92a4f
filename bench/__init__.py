"""Benchmarks run by hand; see bench/README.md."""
