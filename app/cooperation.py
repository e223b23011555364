"""Loops over a request's items that let the rest of their process run between batches.

A gateway process serves every stream and request of its clients on one thread (gevent): a
create of hundreds of thousands of input items held it for seconds, and every other client's
events, requests and ``/healthz`` waited (450,000 one-word messages, a 16 MB body: 8 s).
The work a create does once per item (validating, normalising, estimating, storing) runs in
batches of :data:`BATCH` items, with a pause after each (:func:`pause`); validating and
estimating, in batches of that :func:`weight` (an item's lists' entries count too). A request
of fewer items never pauses, unless an item is heavy (:func:`longest_list`: a list of its own
over a batch; one message of 400,000 text parts held a process for 5 s): a loop over items one
by one (:func:`each`) also pauses once :data:`SLICE_SECONDS` went by since its last pause, and
such an item's list is validated (:mod:`app.validation`), estimated, made a dict and made JSON
(:func:`json_texts`) a batch of its entries at a time.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")

BATCH = 1000
"""Items between two pauses: a batch of the costliest step (validation) takes a few ms."""


PAUSE_SECONDS = 0.000_001
"""Not 0: under gevent's patching, ``sleep(0)`` switches to the greenlets ready to run but does
not poll for I/O, so a client waiting on its socket would wait on (seen: 4 of 200 pauses let
one through); any timer goes round the event loop, its I/O included."""


def pause() -> None:
    """Let the process's other greenlets run (gevent), or its other threads take the GIL."""
    time.sleep(PAUSE_SECONDS)


def in_batches(items: Sequence[T], size: int = BATCH) -> Iterator[Sequence[T]]:
    """``items`` in slices of ``size``, pausing (:func:`pause`) between two."""
    for start in range(0, len(items), size):
        if start:
            pause()
        yield items[start : start + size]


def weight(item: Any) -> int:
    """An item's share of a batch: 1, and 1 more for each entry of its lists (a message's parts).

    A batch of items is :data:`BATCH` of this weight: a thousand messages of 900 parts each are
    900,000 parts to validate, not a thousand items (one call held a process for 2 s).
    """
    fields = item if isinstance(item, dict) else getattr(item, "__dict__", {})
    return 1 + sum(len(value) for value in fields.values() if value.__class__ is list)


def weighed_batches(items: Sequence[T]) -> Iterator[Sequence[T]]:
    """``items`` in slices of about :data:`BATCH` of :func:`weight`, pausing between two.

    A slice holds one item at least, and ends with the item that takes it to a batch.
    """
    start, held = 0, 0
    for index, item in enumerate(items):
        held += weight(item)
        if held >= BATCH or index + 1 == len(items):
            if start:
                pause()
            yield items[start : index + 1]
            start, held = index + 1, 0


def longest_list(fields: Iterable[tuple[str, object]], over: int = BATCH) -> str | None:
    """Of an item's ``fields`` (name, value), the one holding the longest list over ``over``.

    None: no list of the item's is longer than that (by default :data:`BATCH`: not heavy).
    """
    longest, length = None, over
    for name, value in fields:
        if value.__class__ is list and len(value) > length:
            longest, length = name, len(value)
    return longest


def json_texts(items: Iterable[dict[str, Any]]) -> list[str]:
    """Each item as JSON text (``json.dumps``), one by one (:func:`each`).

    A heavy item's longest list (over :data:`BATCH` entries) is made text a batch of entries at a
    time, with a pause between two: one message of 400,000 parts took 0.4 s at once.
    """
    texts = []
    for item in each(items):
        field = longest_list(item.items())
        texts.append(json.dumps(item) if field is None else _heavy_json_text(item, field))
    return texts


def _heavy_json_text(item: dict[str, Any], field: str) -> str:
    """``json.dumps(item)``, its list ``field`` a batch of entries at a time."""
    mark = f"<list {secrets.token_hex(16)}>"  # no text of the item's holds it: made just now
    head = json.dumps({**item, field: mark})
    entries = [json.dumps(batch)[1:-1] for batch in in_batches(item[field])]
    return head.replace(json.dumps(mark), "[" + ", ".join(entries) + "]", 1)


SLICE_SECONDS = 0.02
"""The longest :func:`each` goes on without a pause while its items take long (a batch of small
ones takes a few ms): a heavy item is then followed by a pause of its own."""


def each(items: Iterable[T], every: int = BATCH) -> Iterator[T]:
    """``items`` one by one, with a pause (:func:`pause`) after every ``every`` of them, or sooner.

    It pauses after an item that ends :data:`SLICE_SECONDS` or more after its last pause.
    """
    since = time.monotonic()
    for count, item in enumerate(items):
        if count and (not count % every or time.monotonic() - since >= SLICE_SECONDS):
            pause()
            since = time.monotonic()
        yield item


LARGE_BYTES = 1 << 20
"""A request body (or WebSocket message) this large is made a response one at a time in its
process (:func:`one_large_at_a_time`)."""


class TenantTurns:
    """One place, taken by the tenants waiting for it in turn, each tenant's waiters in order.

    A tenant with many waiting holds another tenant back by at most one of its own: when the
    place frees, it goes to the tenant after the one that held it (round robin). Its locks and
    events are ``threading``'s, which gevent patches: a waiter lets its process's other
    greenlets run. A waiter stopped while it waits (a deadline's exception, a killed greenlet)
    leaves its turn, or passes on the place it was given meanwhile.
    """

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._holder: str | None = None
        """The tenant holding the place (None: it is free)."""
        self._waiting: OrderedDict[str, deque[threading.Event]] = OrderedDict()
        """The tenants waiting, the next to have the place first, each with its waiters."""

    @contextmanager
    def held(self, tenant: str) -> Iterator[None]:
        """Hold the place for ``tenant``, waiting for the turns before."""
        turn = self._take(tenant)
        if turn is not None:
            try:
                turn.wait()
            except BaseException:
                self._leave(tenant, turn)
                raise
        try:
            yield
        finally:
            self._release()

    def _take(self, tenant: str) -> threading.Event | None:
        """None: the place was free and is ``tenant``'s; else the event that hands it over."""
        with self._mutex:
            if self._holder is None:
                self._holder = tenant
                return None
            turn = threading.Event()
            self._waiting.setdefault(tenant, deque()).append(turn)
            return turn

    def _leave(self, tenant: str, turn: threading.Event) -> None:
        with self._mutex:
            waiters = self._waiting.get(tenant)
            if waiters is not None and turn in waiters:
                waiters.remove(turn)
                if not waiters:
                    del self._waiting[tenant]
                return
        self._release()  # it was handed the place as it stopped: the next one's now

    def _release(self) -> None:
        with self._mutex:
            holder = self._holder
            if holder is not None and holder in self._waiting and len(self._waiting) > 1:
                self._waiting.move_to_end(holder)  # the others' turn first
            if not self._waiting:
                self._holder = None
                return
            tenant, waiters = next(iter(self._waiting.items()))
            turn = waiters.popleft()
            if waiters:
                self._waiting.move_to_end(tenant)
            else:
                del self._waiting[tenant]
            self._holder = tenant
            turn.set()


_LARGE = TenantTurns()
"""The process's one place for a large body (a gateway's threading is gevent's: patched first)."""


@contextmanager
def one_large_at_a_time(size: int, *, tenant: str) -> Iterator[None]:
    """Hold the process's place for a large body (``size`` bytes) while it is made a response.

    A body's items take many times its size while they are checked and stored (450,000
    one-word messages, 16 MB: 1.1 GB at the peak). Before the pauses above, a process took
    large bodies one after another, for it did nothing else meanwhile; with them, two at once
    would add up. So they still go one at a time, while everything smaller goes on: under
    gevent a body waiting for the place lets the other greenlets run. The tenants whose large
    bodies wait take the place in turn (:class:`TenantTurns`): one sending many delays
    another's by one of its bodies, not all. A body under :data:`LARGE_BYTES` takes no place.
    """
    if size < LARGE_BYTES:
        yield
        return
    with _LARGE.held(tenant):
        yield


DECODED_PER_TENANT = 2
"""A tenant's large WebSocket messages decoded and not yet made responses, at most, in a process."""


class TenantSlots:
    """Slots each tenant holds at most ``per_tenant`` of at once; a taker waits for one.

    Tenants do not wait for each other: one holding all of its own slots holds back only its
    own further takers. Its condition is ``threading``'s, which gevent patches.
    """

    def __init__(self, per_tenant: int) -> None:
        self.per_tenant = per_tenant
        self._held: dict[str, int] = {}
        self._freed = threading.Condition()

    def take(self, tenant: str, timeout: float) -> Callable[[], None] | None:
        """A slot for ``tenant``, waiting ``timeout`` seconds at most; None: none came.

        Returns the slot's release, which gives it back once however often it is called.
        """
        deadline = time.monotonic() + timeout
        with self._freed:
            while self._held.get(tenant, 0) >= self.per_tenant:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._freed.wait(left)
            self._held[tenant] = self._held.get(tenant, 0) + 1
        released = False

        def release() -> None:
            nonlocal released
            with self._freed:
                if released:
                    return
                released = True
                if self._held[tenant] > 1:
                    self._held[tenant] -= 1
                else:
                    del self._held[tenant]
                self._freed.notify_all()

        return release

    def held(self, tenant: str) -> int:
        """The slots ``tenant`` holds."""
        with self._freed:
            return self._held.get(tenant, 0)


DECODED = TenantSlots(DECODED_PER_TENANT)
"""The process's slots for decoded large WebSocket messages: a WebSocket message's size is known
only once it is read whole, and its decoded items take many times its bytes (450,000 one-word
messages: 15.75 MB sent, 110 MB decoded), so a tenant's sockets may not hold many of them decoded
while they wait for the large-body place (:func:`one_large_at_a_time`): its next large message
stays undecoded, its socket unread, until one of its own is made a response. (A request body
waits for the place as bytes, and is decoded in its turn.)"""
