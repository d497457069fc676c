"""Errors raised by the bank."""


class BankError(Exception):
    pass


class InsufficientFunds(BankError):
    def __init__(self, balance, amount):
        super().__init__(f"cannot withdraw {amount}: balance is {balance}")
        self.balance = balance
        self.amount = amount
