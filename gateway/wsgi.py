"""WSGI entry point for gunicorn: ``gateway.wsgi:application``."""

from __future__ import annotations

from app.config import Settings
from app.telemetry import logs
from gateway.factory import create_app

settings = Settings()
logs.configure(settings.log_format)
application = create_app(settings)
