"""The linter, as pyproject.toml configures it, finds nothing in the course's code and notebook sources."""

import subprocess
import sys

from course import ROOT


def test_ruff_finds_nothing():
    run = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format=concise", ROOT],
                         cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
