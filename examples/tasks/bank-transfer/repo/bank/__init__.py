"""A toy bank."""
