import pytest
from inventory.store import Inventory


@pytest.fixture
def inventory():
    stock = Inventory()
    stock.add("bolt", 100, 0.1)
    stock.add("nut", 3, 0.05)
    stock.add("gear", 1, 7.5)
    return stock


def test_restock_adds(inventory):
    inventory.restock("nut", 20)
    assert inventory.quantity("nut") == 23


def test_restock_unknown_item(inventory):
    with pytest.raises(KeyError):
        inventory.restock("spring", 5)


@pytest.mark.parametrize("quantity", [0, -2, 1.5])
def test_restock_rejects_bad_quantities(inventory, quantity):
    with pytest.raises(ValueError):
        inventory.restock("bolt", quantity)
    assert inventory.quantity("bolt") == 100


def test_low_stock_sorted(inventory):
    assert inventory.low_stock(5) == ["gear", "nut"]
    assert inventory.low_stock(1) == []


def test_existing_behaviour(inventory):
    inventory.remove("bolt", 40)
    assert inventory.quantity("bolt") == 60
    assert inventory.total_value() == pytest.approx(60 * 0.1 + 3 * 0.05 + 7.5)
