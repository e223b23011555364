"""A process's cache of values that never change, bounded by a count and by bytes.

The history items a process read (:class:`app.store.history.ReadItems`) and the model's view it
prepared of them (:class:`app.model_prefix.PreparedPrefixes`) are both kept this way: least
recently used first out, a key's value replaced only by a longer one, and a value larger than
the bytes allowed not kept at all (it would push every other value out and still be too much).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class BoundedLru(Generic[K, V]):
    """Values by key, at most ``capacity`` counted and ``capacity_bytes`` sized, thread-safe.

    ``count(value)``: what a value stands for (items), which also orders two values of one key;
    ``size(value)``: its bytes.
    """

    def __init__(
        self,
        *,
        capacity: int,
        capacity_bytes: int,
        count: Callable[[V], int],
        size: Callable[[V], int],
    ) -> None:
        self.capacity = capacity
        self.capacity_bytes = capacity_bytes
        self._count = count
        self._size = size
        self._values: OrderedDict[K, V] = OrderedDict()
        self._held = 0
        self._held_bytes = 0
        self._lock = threading.Lock()

    @property
    def held_bytes(self) -> int:
        """The bytes of the values kept now."""
        return self._held_bytes

    def get(self, key: K) -> V | None:
        """The value kept for ``key`` (now the most recently used), or None."""
        with self._lock:
            value = self._values.get(key)
            if value is not None:
                self._values.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> None:
        """Keep ``value`` for ``key``, unless the one kept counts as much or more."""
        with self._lock:
            known = self._values.get(key)
            if known is not None and self._count(known) >= self._count(value):
                return
            if known is not None:
                self._forget(key)
            if self._size(value) > self.capacity_bytes:
                return
            self._values[key] = value
            self._held += self._count(value)
            self._held_bytes += self._size(value)
            while (self._held > self.capacity or self._held_bytes > self.capacity_bytes) and len(
                self._values
            ) > 1:
                self._forget(next(iter(self._values)))

    def drop(self, key: K) -> None:
        """Forget ``key``'s value, if one is kept."""
        with self._lock:
            if key in self._values:
                self._forget(key)

    def _forget(self, key: K) -> None:
        value = self._values.pop(key)
        self._held -= self._count(value)
        self._held_bytes -= self._size(value)
