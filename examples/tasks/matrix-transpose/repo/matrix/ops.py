"""Matrix operations."""


def transpose(m):
    """Return the transpose of m (rows become columns)."""
    size = len(m)
    return [[m[row][col] for row in range(size)] for col in range(size)]


def dot(u, v):
    return sum(a * b for a, b in zip(u, v, strict=True))


def multiply(a, b):
    """Return the matrix product a @ b."""
    columns = transpose(b)
    return [[dot(row, column) for column in columns] for row in a]


def identity(n):
    return [[1 if row == col else 0 for col in range(n)] for row in range(n)]
