"""Prices and discounts."""


def apply_discount(price, percent):
    """Return price reduced by percent (0-100), rounded to cents."""
    if not 0 <= percent <= 100:
        raise ValueError(f"discount must be between 0 and 100, got {percent}")
    return round(price - percent, 2)
