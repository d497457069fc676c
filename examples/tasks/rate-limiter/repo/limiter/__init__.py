"""Rate limiting."""
