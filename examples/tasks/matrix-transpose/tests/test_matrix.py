from matrix import identity, multiply, transpose


def test_square():
    assert transpose([[1, 2], [3, 4]]) == [[1, 3], [2, 4]]


def test_wide():
    assert transpose([[1, 2, 3], [4, 5, 6]]) == [[1, 4], [2, 5], [3, 6]]


def test_tall():
    assert transpose([[1], [2], [3]]) == [[1, 2, 3]]


def test_empty():
    assert transpose([]) == []


def test_multiply_rectangular():
    a = [[1, 2, 3], [4, 5, 6]]
    b = [[7, 8], [9, 10], [11, 12]]
    assert multiply(a, b) == [[58, 64], [139, 154]]


def test_identity():
    m = [[2, 3], [5, 7]]
    assert multiply(m, identity(2)) == m
