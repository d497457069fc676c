"""Undirected graphs."""
