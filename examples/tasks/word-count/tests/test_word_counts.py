from textstats import count_words, most_common
from textstats.words import split_words


def test_case_insensitive():
    assert count_words("The cat saw the dog") == {"the": 2, "cat": 1, "saw": 1, "dog": 1}


def test_punctuation_is_ignored():
    assert count_words("Stop! Stop, thief.") == {"stop": 2, "thief": 1}


def test_any_whitespace_separates():
    assert count_words("a  b\tc\n\na") == {"a": 2, "b": 1, "c": 1}


def test_empty_text():
    assert count_words("") == {}
    assert count_words("   \n ") == {}


def test_lone_punctuation_is_not_a_word():
    assert split_words("wait - what ?") == ["wait", "-", "what"]


def test_most_common():
    text = "b a c b a b. C c c"
    assert most_common(text, 2) == [("c", 4), ("b", 3)]
    assert most_common("x y", 5) == [("x", 1), ("y", 1)]
