"""Pure-Python twin of blockx._fast.readyqueue: a task's FIFO of ready calls.

Retries go to the front (push_front) so a call that lost its executor keeps its
place ahead of calls that never ran. A deque gives O(1) at both ends; the
compiled version is a ring buffer over a Python list, with the same semantics.
Iteration works on a snapshot, so callers may remove/push while iterating."""

from collections import deque

__all__ = ["ReadyQueue"]


class ReadyQueue:
    __slots__ = ("_items",)

    def __init__(self) -> None:
        self._items: deque = deque()

    def push(self, item) -> None:
        self._items.append(item)

    def push_front(self, item) -> None:
        self._items.appendleft(item)

    def pop(self):
        """Remove and return the front item; IndexError when empty."""
        try:
            return self._items.popleft()
        except IndexError:
            raise IndexError("pop from an empty ReadyQueue") from None

    def peek(self):
        """The front item, or None when empty."""
        return self._items[0] if self._items else None

    def __len__(self) -> int:
        return len(self._items)

    def __bool__(self) -> bool:
        return bool(self._items)

    def __iter__(self):
        return iter(list(self._items))

    def clear(self) -> None:
        self._items.clear()

    def drain(self) -> list:
        """All items front to back; the queue is empty afterwards."""
        out = list(self._items)
        self._items.clear()
        return out

    def remove(self, item) -> bool:
        """Remove the first occurrence of item (identity, then ==, like
        list.remove); False when absent. O(n): a rare path (cancellation)."""
        for i, x in enumerate(self._items):
            if x is item or x == item:
                del self._items[i]
                return True
        return False

    def __repr__(self) -> str:
        return f"<ReadyQueue len={len(self._items)}>"
