"""The current `.avsc` schema files (a package only so that setuptools ships them as package data)."""
