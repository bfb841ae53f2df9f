"""The docs say what the code does: the configuration reference is the schemas' own text."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_configuration_reference_is_current_and_every_field_documented():
    """docs/configuration-reference.md is generated from wildtrace/config.py's ``#:`` comments."""
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "config_reference.py"), "--check"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
