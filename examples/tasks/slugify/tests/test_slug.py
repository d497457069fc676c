import pytest
from slug import slugify


@pytest.mark.parametrize(
    ("title", "slug"),
    [
        ("Hello World", "hello-world"),
        ("Héllo, Wörld!", "hello-world"),
        ("  --Already--  ", "already"),
        ("Python 3.11 is out", "python-3-11-is-out"),
        ("a__b", "a-b"),
        ("", ""),
        ("!!!", ""),
    ],
)
def test_slugify(title, slug):
    assert slugify(title) == slug


def test_non_latin_letters_are_dropped():
    assert slugify("Привет world") == "world"
