"""Small dense matrices as lists of rows."""

from matrix.ops import identity, multiply, transpose

__all__ = ["identity", "multiply", "transpose"]
