"""Helpers shared by the tests and the benchmarks (not part of the engine or the pass)."""
