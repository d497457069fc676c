"""A shopping cart."""

from dataclasses import dataclass, field

from shop.pricing import apply_discount


@dataclass
class Line:
    name: str
    unit_price: float
    quantity: int = 1


@dataclass
class Cart:
    lines: list = field(default_factory=list)
    discount_percent: float = 0

    def add(self, name, unit_price, quantity=1):
        self.lines.append(Line(name, unit_price, quantity))

    def subtotal(self):
        return round(sum(line.unit_price for line in self.lines), 2)

    def total(self):
        return apply_discount(self.subtotal(), self.discount_percent)
