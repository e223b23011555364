"""What an action leaves in reference cycles.

The gateway collects its oldest generation rarely (:func:`gateway.worker.collect_less_often`),
so whatever a request leaves in a cycle can wait there for minutes, holding all it refers to.
"""

from __future__ import annotations

import gc
import types
from collections.abc import Callable


def left_in_cycles(action: Callable[[], object]) -> list[object]:
    """The objects ``action`` left unreachable but in reference cycles, found by a collection.

    The collector is off while ``action`` runs, so nothing it leaves is collected unseen.
    """
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        action()
        gc.collect()
        return list(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


def errors_and_frames(objects: list[object]) -> list[object]:
    """The exceptions and stack frames among ``objects``: a raised error held by a frame it came
    through is in a cycle with it, and every frame of its stack (a request's, a session's) with
    it."""
    return [o for o in objects if isinstance(o, BaseException | types.FrameType)]
