from shop.cart import Cart


def test_empty_cart_costs_nothing():
    assert Cart().total() == 0


def test_one_item():
    cart = Cart()
    cart.add("pen", 2.5)
    assert cart.total() == 2.5
