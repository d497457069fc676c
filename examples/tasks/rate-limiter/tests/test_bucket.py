from limiter.bucket import TokenBucket
from limiter.clock import ManualClock
from limiter.gate import Gate


def drain(bucket, limit=1000):
    """How many requests the bucket allows in a row (at most limit, so a broken bucket cannot hang)."""
    allowed = 0
    while allowed < limit and bucket.allow():
        allowed += 1
    return allowed


def test_starts_full():
    bucket = TokenBucket(capacity=3, rate=1, clock=ManualClock())
    assert drain(bucket) == 3


def test_refill_is_not_counted_twice():
    clock = ManualClock()
    bucket = TokenBucket(capacity=5, rate=1, clock=clock)
    drain(bucket)
    clock.advance(2)
    assert drain(bucket) == 2
    clock.advance(1)
    assert drain(bucket) == 1


def test_never_more_than_capacity():
    clock = ManualClock()
    bucket = TokenBucket(capacity=2, rate=10, clock=clock)
    clock.advance(100)
    assert drain(bucket) == 2


def test_fractional_refill_accumulates():
    clock = ManualClock()
    bucket = TokenBucket(capacity=1, rate=0.5, clock=clock)
    assert bucket.allow()
    clock.advance(1)
    assert not bucket.allow()
    clock.advance(1)
    assert bucket.allow()


def test_gate_separates_clients():
    clock = ManualClock()
    gate = Gate(capacity=1, rate=1, clock=clock)
    assert gate.allow("a")
    assert not gate.allow("a")
    assert gate.allow("b")
    clock.advance(1)
    assert gate.allow("a")
