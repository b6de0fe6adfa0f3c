"""Benchmarks; each prints its figures and a ratio against a peer measured in the same run."""
