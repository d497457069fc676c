"""Accounts hold a balance in cents."""


def _check_amount(amount):
    if amount <= 0:
        raise ValueError(f"amount must be positive, got {amount}")


class Account:
    def __init__(self, owner, balance=0):
        self.owner = owner
        self.balance = balance

    def deposit(self, amount):
        _check_amount(amount)
        self.balance += amount

    def withdraw(self, amount):
        self.balance -= amount
