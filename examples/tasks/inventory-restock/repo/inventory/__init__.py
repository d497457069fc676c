"""A small stock-keeping package."""
