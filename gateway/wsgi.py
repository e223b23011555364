"""WSGI entry point for gunicorn: ``gateway.wsgi:application``."""

from __future__ import annotations

from app.config import Settings
from app.telemetry import logs, tracing
from broker import telemetry
from broker.telemetry import instrument_celery
from gateway.factory import create_app

settings = Settings()
logs.configure(settings.log_format, settings.log_level.upper())
if tracing.setup("antwort-gateway"):
    instrument_celery()
application = create_app(settings)
# the sends it stamps on the fleet's clock, which the workers time their starts by
telemetry.use_clock(application.extensions["antwort"].store.now)
