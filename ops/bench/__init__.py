"""Benchmarks behind `trialog bench NAME`; each writes its figures to BENCHMARKS.md."""
