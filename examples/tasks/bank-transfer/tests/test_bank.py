import pytest
from bank.account import Account
from bank.errors import BankError, InsufficientFunds
from bank.transfer import transfer


def test_overdraft_is_refused():
    account = Account("ada", 100)
    with pytest.raises(InsufficientFunds):
        account.withdraw(101)
    assert account.balance == 100


def test_insufficient_funds_is_a_bank_error():
    with pytest.raises(BankError):
        Account("ada", 0).withdraw(1)


def test_withdraw_everything():
    account = Account("ada", 100)
    account.withdraw(100)
    assert account.balance == 0


def test_withdraw_rejects_non_positive_amounts():
    account = Account("ada", 100)
    with pytest.raises(ValueError):
        account.withdraw(0)
    with pytest.raises(ValueError):
        account.withdraw(-5)
    assert account.balance == 100


def test_transfer():
    ada, bob = Account("ada", 100), Account("bob", 10)
    transfer(ada, bob, 60)
    assert (ada.balance, bob.balance) == (40, 70)


def test_failed_transfer_changes_nothing():
    ada, bob = Account("ada", 100), Account("bob", 10)
    with pytest.raises(InsufficientFunds):
        transfer(ada, bob, 500)
    assert (ada.balance, bob.balance) == (100, 10)
