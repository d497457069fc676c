"""Counting words."""

from textstats.words import split_words


def count_words(text):
    """Return a dict mapping each word to the number of times it occurs."""
    counts = {}
    for word in split_words(text):
        counts[word] = counts.get(word, 0) + 1
    return counts


def most_common(text, n):
    """Return the n most common (word, count) pairs, most common first, ties in alphabetical order."""
    counts = count_words(text)
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:n]
