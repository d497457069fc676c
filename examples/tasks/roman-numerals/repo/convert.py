"""Convert between Arabic and Roman numerals: `python convert.py 1994` or `python convert.py MCMXCIV`."""

import sys

from roman import from_roman, to_roman


def convert(text):
    return to_roman(int(text)) if text.isdigit() else str(from_roman(text.upper()))


if __name__ == "__main__":
    print(convert(sys.argv[1]))
