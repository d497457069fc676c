import pytest
from minicsv.errors import CsvError
from minicsv.reader import parse_line
from minicsv.table import read_records


def test_plain_fields():
    assert parse_line("a,b,c") == ["a", "b", "c"]
    assert parse_line(" a , b") == [" a ", " b"]


def test_empty_fields():
    assert parse_line("") == [""]
    assert parse_line(",") == ["", ""]
    assert parse_line('a,,""') == ["a", "", ""]


def test_quoted_commas():
    assert parse_line('"Smith, John",42') == ["Smith, John", "42"]


def test_escaped_quotes():
    assert parse_line('"say ""hi""",x') == ['say "hi"', "x"]
    assert parse_line('""""') == ['"']


def test_quote_inside_unquoted_field_is_literal():
    assert parse_line('5" floppy,1') == ['5" floppy', "1"]


@pytest.mark.parametrize("line", ['"open', '"a"b,c', 'x,"unterminated'])
def test_malformed(line):
    with pytest.raises(CsvError):
        parse_line(line)


def test_records():
    text = 'name,city\n"Lovelace, Ada",London\nTuring,"Wilmslow"\n'
    assert read_records(text) == [
        {"name": "Lovelace, Ada", "city": "London"},
        {"name": "Turing", "city": "Wilmslow"},
    ]
