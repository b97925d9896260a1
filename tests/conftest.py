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


# Numbers spread over the combinations by a fixed rule, so that no test sees only the
# defaults (seed 42): a failure that depends on the seed or a numeric answer shows up, and
# reruns see the same values (pytest's header lists them). Patience stays >= 3 so a 3-epoch
# training run is never cut short by early stopping.
SEEDS = (0, 123, 7, 4294967295, 2024, 42, 31337, 1)
MAX_GRAD_NORMS = (0.5, 1.0, 2.5, 5.0)
PLATEAU_PATIENCES = (0, 1, 2)
PATIENCE_MARGINS = (1, 2, 4)


def _numbers(index: int, scheduler: str) -> dict:
    plateau_patience = PLATEAU_PATIENCES[index % 3]
    margin = PATIENCE_MARGINS[(index // 3) % 3]
    return {
        "seed": SEEDS[(index + index // 8) % len(SEEDS)],
        "max_grad_norm": MAX_GRAD_NORMS[(index // 4) % len(MAX_GRAD_NORMS)],
        "plateau_patience": plateau_patience,
        "patience": max(3, plateau_patience + margin) if scheduler == "plateau" else 2 + margin,
    }


# Every combination scaffold offers: task x scheduler x AMP x clipping x early stopping.
COMBOS = [
    Options(
        task=task,
        scheduler=scheduler,
        amp=amp,
        clip=clip,
        early_stopping=early_stopping,
        **_numbers(index, scheduler),
    )
    for index, (task, scheduler, amp, clip, early_stopping) in enumerate(
        itertools.product(
            ("classification", "regression"), ("cosine", "plateau"), *[(False, True)] * 3
        )
    )
]


def combo_id(options: Options) -> str:
    """The switches, e.g. cla-cosine-fp32-noclip-noes (package names are built from it)."""
    flags = [
        options.task[:3],
        options.scheduler,
        "amp" if options.amp else "fp32",
        "clip" if options.clip else "noclip",
        "es" if options.early_stopping else "noes",
    ]
    return "-".join(flags)


def combo_numbers(options: Options) -> str:
    """The numeric answers that shape the project, e.g. 'seed=0 patience=5'."""
    used = options.answers()
    names = ("seed", "plateau_patience", "max_grad_norm", "patience")
    return " ".join(f"{name}={used[name]}" for name in names if name in used)


def pytest_report_header(config):
    lines = [f"{combo_id(o)}: {combo_numbers(o)}" for o in COMBOS]
    return ["combination numbers (fixed spread, tests/conftest.py):"] + [
        "  " + "; ".join(lines[i : i + 4]) for i in range(0, len(lines), 4)
    ]


def render(dest: Path, options: Options | None = None, **kwargs):
    """Render `options` into dest; the project is named after dest's last part."""
    return render_project(dest, *project_names(str(dest)), options or Options(), **kwargs)


@pytest.fixture(scope="session")
def render_combo(tmp_path_factory):
    """Render each option set once per test process."""
    cache = {}

    def get(options: Options):
        # Keyed by every answer: two option sets may share a combo_id but not their numbers.
        if options not in cache:
            dest = tmp_path_factory.mktemp("combos") / f"proj-{combo_id(options)}"
            cache[options] = render(dest, options)
        return cache[options]

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
