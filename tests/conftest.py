"""Shared helpers: every option combination, a covering set of them, a cached renderer, and a
subprocess environment."""

import itertools
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from scaffold.options import OPTIONS, Options, project_names
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


# The options that shape the loop: every question with choices (the task, the scheduler) and
# every switch (AMP, clipping, early stopping, distributed), in copier.yml's order, with their
# values.
# Read from the option definitions, so a new task or switch joins every product below.
FACTORS = {
    name: q.choices if q.choices else (False, True)
    for name, q in OPTIONS.items()
    if q.choices or q.type is bool
}
TASKS = FACTORS["task"]


def _product() -> list:
    combos = []
    for index, values in enumerate(itertools.product(*FACTORS.values())):
        chosen = dict(zip(FACTORS, values, strict=True))
        combos.append(Options(**chosen, **_numbers(index, chosen["scheduler"])))
    return combos


# Every combination scaffold offers: the full product of the factors.
COMBOS = _product()


def _short(word: str, length: int) -> str:
    # Letters and digits only: the id becomes part of a package name.
    return re.sub(r"[^a-z0-9]", "", word.lower())[:length]


def task_ids(tasks) -> dict[str, str]:
    """A short id per task: the first three letters of each dash-separated word, e.g.
    classification -> cla, image-classification -> imacla; more letters where two collide."""
    for length in range(3, max(map(len, tasks)) + 1):
        ids = {t: "".join(_short(w, length) for w in re.split(r"[-_ ]+", t)) for t in tasks}
        if len(set(ids.values())) == len(ids):
            return ids
    return ids  # names equal in their letters and digits: a test reports the collision


TASK_IDS = task_ids(TASKS)
# How a switch reads in an id, on and off. Others read as their initials, e.g. es / noes.
SWITCH_WORDS = {"amp": ("amp", "fp32"), "distributed": ("ddp", "noddp")}


def combo_id(options: Options) -> str:
    """The factors, e.g. cla-cosine-fp32-noclip-noes (package names are built from it)."""
    words = []
    for name, values in FACTORS.items():
        value = getattr(options, name)
        if name == "task":
            words.append(TASK_IDS[value])
        elif values == (False, True):
            on = "".join(w[0] for w in name.split("_")) if "_" in name else _short(name, 8)
            words.append(SWITCH_WORDS.get(name, (on, "no" + on))[not value])
        else:
            words.append(_short(value, 12))
    return "-".join(words)


def covering_set(options_list=None, factors=None) -> list:
    """A few option sets from options_list (default COMBOS) in which every pair of values of
    any two factors (default FACTORS) occurs at least once: a pairwise covering set.

    Greedy and deterministic: each step takes the option set that covers the most pairs not
    covered yet, the first in the list on a tie, so the defaults come first. Only pairs that
    occur in options_list are asked for. With five loop factors (task, scheduler, AMP,
    clipping, early stopping) it finds 6 sets for 2 or 3 tasks and 8 for 4, the fewest
    possible (tests/test_render.py checks); the full product, with distributed as a sixth
    switch and 4 tasks, gets 8 (tasks x schedulers, again the fewest possible).
    """
    options_list = COMBOS if options_list is None else list(options_list)
    names = list(FACTORS if factors is None else factors)

    def pairs(options) -> set:
        values = [(name, getattr(options, name)) for name in names]
        return set(itertools.combinations(values, 2))

    needed = set().union(*map(pairs, options_list))
    chosen = []
    while needed:
        best = max(options_list, key=lambda o: len(pairs(o) & needed))  # max keeps the first
        chosen.append(best)
        needed -= pairs(best)
    return chosen


COVERING = covering_set()
# A generated project's own test suite takes about 15 s on a core; 32 of them fit the CI
# budget (about 4 minutes on 2 cores), more do not. Beyond that the suites run on the
# covering set; every combination is still rendered, linted, imported and trained.
MAX_FULL_SUITES = 32
SUITE_COMBOS = COMBOS if len(COMBOS) <= MAX_FULL_SUITES else COVERING


def combo_numbers(options: Options) -> str:
    """The numeric answers that shape the project, e.g. 'seed=0 patience=5'."""
    used = options.answers()
    names = ("seed", "plateau_patience", "max_grad_norm", "patience")
    return " ".join(f"{name}={used[name]}" for name in names if name in used)


def pytest_report_header(config):
    lines = [f"{combo_id(o)}: {combo_numbers(o)}" for o in COMBOS]
    suites = (
        f"all {len(COMBOS)} combinations"
        if SUITE_COMBOS is COMBOS
        else f"the covering set ({len(COMBOS)} combinations > {MAX_FULL_SUITES})"
    )
    return (
        [f"combination numbers (fixed spread, tests/conftest.py), {len(COMBOS)} combinations:"]
        + ["  " + "; ".join(lines[i : i + 4]) for i in range(0, len(lines), 4)]
        + [f"pairwise covering set ({len(COVERING)}): " + ", ".join(map(combo_id, COVERING))]
        + [f"generated projects' own test suites run on {suites}"]
    )


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
