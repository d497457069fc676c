"""One bucket per client."""

from limiter.bucket import TokenBucket
from limiter.clock import monotonic


class Gate:
    def __init__(self, capacity, rate, clock=monotonic):
        self.capacity = capacity
        self.rate = rate
        self.clock = clock
        self.buckets = {}

    def allow(self, client):
        if client not in self.buckets:
            self.buckets[client] = TokenBucket(self.capacity, self.rate, self.clock)
        return self.buckets[client].allow()
