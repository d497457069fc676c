"""A small arithmetic calculator."""

from arith.parser import evaluate

__all__ = ["evaluate"]
