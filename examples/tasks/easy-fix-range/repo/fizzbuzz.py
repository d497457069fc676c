"""FizzBuzz, built on counting."""

from counting import numbers_up_to


def word_for(number):
    if number % 15 == 0:
        return "FizzBuzz"
    if number % 3 == 0:
        return "Fizz"
    if number % 5 == 0:
        return "Buzz"
    return str(number)


def fizzbuzz(n):
    """Return the FizzBuzz words for 1..n."""
    return [word_for(number) for number in numbers_up_to(n)]
