"""gunicorn's settings file patches the standard library for gevent before anything holds it."""

from __future__ import annotations

import subprocess
import sys

PROBE = (
    "import sys, gunicorn.app.wsgiapp; "  # gunicorn's imports first, as in `antwort gateway`
    "import gateway.gunicorn_conf; "
    "print(sorted(m for m in ('redis', 'flask', 'gateway.factory') if m in sys.modules))"
)


def test_loading_the_settings_patches_before_redis_or_flask_is_imported() -> None:
    # Modules imported before monkey.patch_all() keep the unpatched names they imported, and
    # gevent warns: the gateway package's own __init__ runs first, so it must stay free of them.
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "MonkeyPatchWarning" not in done.stderr, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"
