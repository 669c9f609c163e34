"""mypy runs clean on the package: placement_opt/, solvers/ and cli/ (installed as
placement_opt.solvers and placement_opt.cli, so they are checked through a tree of symbolic
links laid out as the installed package is). Settings: ``[tool.mypy]`` in pyproject.toml."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _installed_layout(tmp: str) -> str:
    """A folder holding ``placement_opt`` as installed: the core's entries plus solvers/ and cli/."""
    pkg = os.path.join(tmp, "placement_opt")
    os.makedirs(pkg)
    for name in os.listdir(os.path.join(ROOT, "placement_opt")):
        if name != "__pycache__":
            os.symlink(os.path.join(ROOT, "placement_opt", name), os.path.join(pkg, name))
    for sub in ("solvers", "cli"):
        os.symlink(os.path.join(ROOT, sub), os.path.join(pkg, sub))
    return tmp


def test_mypy_is_clean(tmp_path):
    pytest.importorskip("mypy")
    root = _installed_layout(str(tmp_path / "tree"))
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", os.path.join(ROOT, "pyproject.toml"),
         "--cache-dir", str(tmp_path / "cache"), "-p", "placement_opt"],
        cwd=root, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-20000:] + result.stderr[-2000:]
