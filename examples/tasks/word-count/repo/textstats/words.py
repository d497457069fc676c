"""Splitting text into words."""

PUNCTUATION = ".,!?;:"


def split_words(text):
    """Return the words of text, in order."""
    return [word.strip(PUNCTUATION) for word in text.split(" ")]
