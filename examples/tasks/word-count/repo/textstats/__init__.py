"""Word statistics."""

from textstats.counts import count_words, most_common

__all__ = ["count_words", "most_common"]
