from textstats import count_words


def test_simple_sentence():
    assert count_words("one two two") == {"one": 1, "two": 2}
