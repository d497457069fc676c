"""The items an inventory holds."""

from dataclasses import dataclass


@dataclass
class Item:
    name: str
    quantity: int
    unit_price: float

    def value(self):
        return self.quantity * self.unit_price
