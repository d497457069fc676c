"""A stream's output cut to a cap: the head and the tail are kept, the middle is counted and dropped.

Both ends matter to an agent: the head says what started, the tail holds the error or the test summary.
The rendered text carries a marker with the number of bytes dropped, so nobody mistakes it for the whole.
"""

from __future__ import annotations


def drop_marker(dropped: int) -> str:
    return f"\n[... {dropped} bytes dropped by trialog ...]\n"


class BoundedOutput:
    """Accumulates a byte stream, keeping at most `limit` bytes (half head, half tail)."""

    def __init__(self, limit: int) -> None:
        self._head_cap = limit - limit // 2
        self._tail_cap = limit // 2
        self._head = bytearray()
        self._tail = bytearray()
        self.total = 0

    @classmethod
    def from_parts(cls, limit: int, head: bytes, tail: bytes, total: int) -> BoundedOutput:
        """What another process kept of a stream (same split of `limit`), with the stream's total size."""
        kept = cls(limit)
        if len(head) > kept._head_cap or len(tail) > kept._tail_cap or len(head) + len(tail) > total:
            raise ValueError("parts that do not fit the cap or the total")
        kept._head, kept._tail, kept.total = bytearray(head), bytearray(tail), total
        return kept

    def write(self, data: bytes) -> None:
        self.total += len(data)
        room = self._head_cap - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if not data:
            return
        self._tail += data[-self._tail_cap :] if self._tail_cap else b""
        excess = len(self._tail) - self._tail_cap
        if excess > 0:
            del self._tail[:excess]

    @property
    def dropped(self) -> int:
        return self.total - len(self._head) - len(self._tail)

    def text(self) -> str:
        """The kept bytes as text (invalid UTF-8 replaced), with a drop marker where bytes were cut."""
        if not self.dropped:  # nothing cut: decode as one piece, so no character is split at the seam
            return bytes(self._head + self._tail).decode("utf-8", "replace")
        head = bytes(self._head).decode("utf-8", "replace")
        return head + drop_marker(self.dropped) + bytes(self._tail).decode("utf-8", "replace")
