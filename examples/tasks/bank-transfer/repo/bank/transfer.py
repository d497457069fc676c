"""Moving money between accounts."""


def transfer(source, target, amount):
    target.deposit(amount)
    source.withdraw(amount)
