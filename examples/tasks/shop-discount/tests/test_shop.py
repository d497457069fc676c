import pytest
from shop.cart import Cart
from shop.pricing import apply_discount


def test_discount_is_a_percentage():
    assert apply_discount(200, 10) == 180
    assert apply_discount(19.99, 0) == 19.99
    assert apply_discount(50, 100) == 0


def test_discount_rounds_to_cents():
    assert apply_discount(9.99, 15) == 8.49


def test_bad_discount():
    with pytest.raises(ValueError):
        apply_discount(10, 101)


def test_quantities_count():
    cart = Cart()
    cart.add("pen", 1.5, quantity=4)
    cart.add("pad", 3.0)
    assert cart.subtotal() == 9.0
    assert cart.total() == 9.0


def test_discounted_cart():
    cart = Cart(discount_percent=25)
    cart.add("mug", 8.0, quantity=2)
    assert cart.total() == 12.0
