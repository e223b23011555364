"""Loops over a request's items that let the rest of their process run between batches.

A gateway process serves every stream and request of its clients on one thread (gevent): a
create of hundreds of thousands of input items held it for seconds, and every other client's
events, requests and ``/healthz`` waited (450,000 one-word messages, a 16 MB body: 8 s).
The work a create does once per item (validating, normalising, estimating, storing) runs in
batches of :data:`BATCH` items, with a pause after each (:func:`pause`). A request of fewer
items never pauses.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from typing import TypeVar

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


def each(items: Iterable[T], every: int = BATCH) -> Iterator[T]:
    """``items`` one by one, pausing (:func:`pause`) after every ``every`` of them."""
    for count, item in enumerate(items):
        if count and not count % every:
            pause()
        yield item
