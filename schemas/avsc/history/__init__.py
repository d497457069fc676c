"""Frozen earlier versions of message schemas (a package only so that setuptools ships them)."""
