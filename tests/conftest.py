"""Shared helpers: every option combination, a cached renderer, and a subprocess environment."""

import itertools
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from scaffold.options import Options, project_names
from scaffold.render import render_project

REPO = Path(__file__).resolve().parent.parent


def pytest_configure(config):
    # A wheel-installed scaffold keeps its template history under SCAFFOLD_HOME: never the
    # real home folder in tests (subprocesses inherit this too).
    if "SCAFFOLD_HOME" not in os.environ:
        os.environ["SCAFFOLD_HOME"] = tempfile.mkdtemp(prefix="scaffold-home-")


# Every combination scaffold offers: task x scheduler x AMP x clipping x early stopping.
COMBOS = [
    Options(task=task, scheduler=scheduler, amp=amp, clip=clip, early_stopping=early_stopping)
    for task, scheduler, amp, clip, early_stopping in itertools.product(
        ("classification", "regression"), ("cosine", "plateau"), *[(False, True)] * 3
    )
]


def combo_id(options: Options) -> str:
    flags = [
        options.task[:3],
        options.scheduler,
        "amp" if options.amp else "fp32",
        "clip" if options.clip else "noclip",
        "es" if options.early_stopping else "noes",
    ]
    return "-".join(flags)


def render(dest: Path, options: Options | None = None, **kwargs):
    """Render `options` into dest; the project is named after dest's last part."""
    return render_project(dest, *project_names(str(dest)), options or Options(), **kwargs)


@pytest.fixture(scope="session")
def render_combo(tmp_path_factory):
    """Render each combination once per test process."""
    cache = {}

    def get(options: Options):
        key = combo_id(options)
        if key not in cache:
            dest = tmp_path_factory.mktemp("combos") / f"proj-{key}"
            cache[key] = render(dest, options)
        return cache[key]

    return get


def project_env() -> dict:
    """Environment for running a generated project from its folder without installing it."""
    env = dict(os.environ)
    env["PYTHONPATH"] = "src"
    # Test workers already use every core; more torch threads than cores makes them spin.
    env["OMP_NUM_THREADS"] = "1"
    return env


def run(command: list[str], cwd: Path, timeout: float = 300, **kwargs):
    return subprocess.run(
        command, cwd=cwd, capture_output=True, text=True, timeout=timeout, **kwargs
    )


PYTHON = sys.executable
