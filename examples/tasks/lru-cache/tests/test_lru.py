from cache.lru import LRUCache
from cache.memo import Memo


def test_evicts_least_recently_put():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("c", 3)
    assert "a" not in cache
    assert cache.get("b") == 2 and cache.get("c") == 3


def test_get_counts_as_use():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1
    cache.put("c", 3)
    assert "b" not in cache
    assert cache.keys() == ["a", "c"]


def test_put_existing_key_updates_without_evicting():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("a", 10)
    assert len(cache) == 2
    assert cache.get("a") == 10
    cache.put("c", 3)
    assert cache.keys() == ["a", "c"]


def test_miss_returns_default():
    cache = LRUCache(1)
    assert cache.get("nope") is None
    assert cache.get("nope", 7) == 7
    assert len(cache) == 0


def test_memo_keeps_recent_results():
    memo = Memo(lambda x: x * x, capacity=2)
    assert [memo(2), memo(3), memo(2), memo(4), memo(2)] == [4, 9, 4, 16, 4]
    assert memo.calls == 3
