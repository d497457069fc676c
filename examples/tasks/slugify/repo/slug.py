"""URL slugs for titles."""


def slugify(title):
    """Return the URL slug of title (see the task instruction)."""
    raise NotImplementedError
