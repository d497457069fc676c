"""A token bucket."""

from limiter.clock import monotonic


class TokenBucket:
    def __init__(self, capacity, rate, clock=monotonic):
        self.capacity = capacity
        self.rate = rate
        self.clock = clock
        self.tokens = capacity
        self.created = clock()

    def _refill(self):
        elapsed = self.clock() - self.created
        self.tokens += int(elapsed * self.rate)

    def allow(self):
        self._refill()
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False
