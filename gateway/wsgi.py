"""WSGI entry point for gunicorn: ``gateway.wsgi:application``."""

from __future__ import annotations

import logging

from gateway.factory import create_app

logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
application = create_app()
