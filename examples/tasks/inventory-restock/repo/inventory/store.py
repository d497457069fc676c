"""An inventory of items, by name."""

from inventory.models import Item


class Inventory:
    def __init__(self):
        self._items = {}

    def add(self, name, quantity, unit_price):
        if name in self._items:
            raise ValueError(f"{name} is already stocked")
        self._items[name] = Item(name, quantity, unit_price)

    def remove(self, name, quantity):
        item = self._items[name]
        if quantity > item.quantity:
            raise ValueError(f"only {item.quantity} {name} left")
        item.quantity -= quantity

    def quantity(self, name):
        return self._items[name].quantity

    def total_value(self):
        return sum(item.value() for item in self._items.values())
