"""A minimal CSV reader (one record per line, no embedded newlines)."""
