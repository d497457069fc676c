from bank.account import Account


def test_deposit_then_withdraw():
    account = Account("ada", 100)
    account.deposit(50)
    account.withdraw(30)
    assert account.balance == 120
