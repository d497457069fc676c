"""Text helpers."""

import unicodedata


def strip_accents(text):
    """Return text with accents removed ('é' -> 'e')."""
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(char for char in decomposed if not unicodedata.combining(char))


def is_slug_char(char):
    """True for the characters a slug keeps: ASCII letters and digits."""
    return char.isascii() and char.isalnum()
