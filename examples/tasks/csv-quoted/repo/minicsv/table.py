"""Records keyed by the header line."""

from minicsv.errors import CsvError
from minicsv.reader import parse_line


def read_records(text):
    lines = [line for line in text.splitlines() if line]
    if not lines:
        return []
    header = parse_line(lines[0])
    records = []
    for line in lines[1:]:
        fields = parse_line(line)
        if len(fields) != len(header):
            raise CsvError(line, f"expected {len(header)} fields, found {len(fields)}")
        records.append(dict(zip(header, fields, strict=True)))
    return records
