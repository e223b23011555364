"""The per-app collaborators of the views."""

from __future__ import annotations

from dataclasses import dataclass

from flask import current_app
from prometheus_client import CollectorRegistry

from app.config import Settings
from app.dispatch import Dispatcher
from app.limits import RateLimiter
from app.model_list import ModelLister
from app.relay import EventHub
from app.store import ResponseStore
from app.tenancy import TenantDirectory


@dataclass(frozen=True, slots=True, kw_only=True)
class Gateway:
    """What the views need, built once per process by ``create_app``."""

    settings: Settings
    store: ResponseStore
    limiter: RateLimiter
    tenants: TenantDirectory
    hub: EventHub
    dispatcher: Dispatcher
    models: ModelLister
    metrics: CollectorRegistry
    """What ``/metrics`` renders (``gateway.metrics.make_registry``)."""


def gateway() -> Gateway:
    """The collaborators of the current app."""
    found: Gateway = current_app.extensions["antwort"]
    return found
