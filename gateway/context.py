"""The per-app collaborators of the views."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from flask import current_app

from app.config import Settings
from app.dispatch import Dispatcher
from app.limits import RateLimiter
from app.relay import EventHub
from app.store import ResponseStore

if TYPE_CHECKING:
    from gateway.metrics import Metrics
    from gateway.models import ModelLister


@dataclass(frozen=True, slots=True, kw_only=True)
class Gateway:
    """What the views need, built once per process by ``create_app``."""

    settings: Settings
    store: ResponseStore
    limiter: RateLimiter
    hub: EventHub
    dispatcher: Dispatcher
    models: ModelLister
    metrics: Metrics


def gateway() -> Gateway:
    """The collaborators of the current app."""
    found: Gateway = current_app.extensions["antwort"]
    return found
