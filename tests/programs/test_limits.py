"""``antwort gateway`` raises the open-files limit for its connections, and says when it cannot.

Each case runs in a child process: limits are per process, and a lowered hard limit cannot be
raised again.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path


def run_child(code: str, repo_root: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=repo_root,
        env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )


def test_antwort_gateway_raises_the_soft_limit_to_the_hard_one(repo_root: Path) -> None:
    child = run_child(
        """
        import resource
        from programs import cli
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
        cli._exec = lambda argv: print(resource.getrlimit(resource.RLIMIT_NOFILE) == (hard, hard))
        cli.main(["gateway"])
        """,
        repo_root,
        ANTWORT_GATEWAY_CONNECTIONS="100",
    )
    assert child.stdout.strip() == "True"
    assert "below" not in child.stderr


def test_antwort_gateway_says_when_the_hard_limit_is_too_low(repo_root: Path) -> None:
    child = run_child(
        """
        import resource
        from programs import cli
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 512))
        cli._exec = lambda argv: print(resource.getrlimit(resource.RLIMIT_NOFILE))
        cli.main(["gateway"])
        """,
        repo_root,
        ANTWORT_GATEWAY_CONNECTIONS="10000",
        ANTWORT_REDIS_MAX_CONNECTIONS="200",
    )
    assert child.stdout.strip() == "(512, 512)"
    assert "open-files limit 512 is below the 10264" in child.stderr
