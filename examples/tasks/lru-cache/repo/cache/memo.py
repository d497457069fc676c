"""Memoising a one-argument function with a bounded cache."""

from cache.lru import MISSING, LRUCache


class Memo:
    def __init__(self, function, capacity):
        self.function = function
        self.cache = LRUCache(capacity)
        self.calls = 0

    def __call__(self, argument):
        value = self.cache.get(argument, MISSING)
        if value is MISSING:
            self.calls += 1
            value = self.function(argument)
            self.cache.put(argument, value)
        return value
