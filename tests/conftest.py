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
    global RENDERED
    if proof_tier(config):
        RENDERED = wider_renders(config.getoption("all_combinations"))
    elif config.getoption("all_combinations", default=False):
        raise pytest.UsageError("--all widens the proof tier's renders: use it with --proof")
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
EMA_DECAYS = (0.999, 0.99, 0.9999, 0.9)


def _numbers(index: int, scheduler: str) -> dict:
    plateau_patience = PLATEAU_PATIENCES[index % 3]
    margin = PATIENCE_MARGINS[(index // 3) % 3]
    return {
        "seed": SEEDS[(index + index // 8) % len(SEEDS)],
        "max_grad_norm": MAX_GRAD_NORMS[(index // 4) % len(MAX_GRAD_NORMS)],
        "ema_decay": EMA_DECAYS[(index // 2) % len(EMA_DECAYS)],
        "plateau_patience": plateau_patience,
        "patience": max(3, plateau_patience + margin) if scheduler == "plateau" else 2 + margin,
    }


# Numbers that decide which code a project gets, not only a value in it: grad_accum renders
# the accumulating loop when above 1. Each joins the factors with two values, its default (the
# code without it) and the value here. 3 is odd, so the tests' small runs (5 batches) fall into
# ragged windows: a shorter last window, whose last batch is smaller.
CODE_NUMBERS = {"grad_accum": 3, "warmup_steps": 4}
# Switches that joined after the code numbers (compile): each, like the code numbers, comes first
# in the product (every combination without it keeps its place and numbers), shows in an id only
# when on, and adds sets to the covering set chosen without it, which stays as it was.
LATE_SWITCHES = ("compile",)
# The late factors in the order they joined: a covering set is chosen without the last group,
# then extended for it (covering_set).
LATE_GROUPS = (tuple(CODE_NUMBERS), LATE_SWITCHES)
LATE = {name for group in LATE_GROUPS for name in group}
# The options that shape the loop: the code numbers, then every question with choices (the
# task, the scheduler) and every switch (AMP, clipping, early stopping, distributed, EMA), in
# copier.yml's order, with their values.
# Read from the option definitions, so a new task or switch joins every product below. The code
# numbers come first: the product then lists every combination without them first, in the
# order and with the spread numbers (_numbers) they had before the numbers joined.
FACTORS = {
    **{name: (False, True) for name in reversed(LATE_SWITCHES)},
    **{name: (OPTIONS[name].default, value) for name, value in CODE_NUMBERS.items()},
    **{
        name: q.choices if q.choices else (False, True)
        for name, q in OPTIONS.items()
        if (q.choices or q.type is bool) and name not in LATE
    },
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
# How a code number reads in an id, before its value; others read as their initials. Short,
# because ids become package names, which must fit in 60 characters with every word present.
NUMBER_WORDS = {"grad_accum": "ga", "warmup_steps": "wu"}
# How a late switch reads in an id when on (off, it is absent).
LATE_WORDS = {"compile": "tc"}  # torch.compile; short, as the longest id has 4 letters left


def combo_id(options: Options) -> str:
    """The factors, e.g. cla-cosine-fp32-noclip-noes-noddp (package names are built from it);
    a code number follows only when it is not its default, e.g. ...-noema-ga3-wu4."""
    words = []
    for name, values in FACTORS.items():
        value = getattr(options, name)
        if name in LATE:
            continue
        if name == "task":
            words.append(TASK_IDS[value])
        elif values == (False, True):
            on = "".join(w[0] for w in name.split("_")) if "_" in name else _short(name, 8)
            words.append(SWITCH_WORDS.get(name, (on, "no" + on))[not value])
        else:
            words.append(_short(value, 12))
    for name in CODE_NUMBERS:
        if getattr(options, name) != FACTORS[name][0]:
            word = NUMBER_WORDS.get(name) or "".join(w[0] for w in name.split("_"))
            words.append(f"{word}{getattr(options, name)}")
    words += [LATE_WORDS[name] for name in LATE_SWITCHES if getattr(options, name)]
    return "-".join(words)


def covering_set(options_list=None, factors=None, strength: int = 2) -> list:
    """A few option sets from options_list (default COMBOS) in which every combination of
    values of any `strength` factors (default FACTORS) occurs at least once: a pairwise (2) or
    three-way (3) covering set.

    Greedy and deterministic: each step takes the option set that covers the most value
    combinations not covered yet, the first in the list on a tie, so the defaults come first.
    Only combinations that occur in options_list are asked for. Pairwise, with five loop factors
    (task, scheduler, AMP, clipping, early stopping) it finds 6 sets for 2 or 3 tasks and 8 for
    4, the fewest possible (tests/test_render.py checks); the full product, with distributed as
    a sixth switch and 4 tasks, gets 8 (tasks x schedulers, again the fewest possible). A new
    switch adds a few sets, where the full product doubles. A code number (CODE_NUMBERS) keeps
    the set chosen without it and adds sets for its pairs: grad_accum adds 4, one per task.
    """
    options_list = COMBOS if options_list is None else list(options_list)
    names = list(FACTORS if factors is None else factors)

    def tuples(options) -> set:
        values = [(name, getattr(options, name)) for name in names]
        return set(itertools.combinations(values, strength))

    needed = set().union(*map(tuples, options_list))
    chosen = []
    groups = [[name for name in group if name in names] for group in LATE_GROUPS]
    numbers = next((group for group in reversed(groups) if group), [])
    if numbers:
        # The last group of late factors to join (the code numbers, then compile) adds sets to
        # the set chosen without it (each at its default), which stays as it was: the sets,
        # their ids and their mutation tables' rows do not change.
        plain = [o for o in options_list if all(getattr(o, n) == FACTORS[n][0] for n in numbers)]
        rest = [name for name in names if name not in numbers]
        chosen = covering_set(plain, rest, strength)
        needed -= set().union(set(), *map(tuples, chosen))
    while needed:
        best = max(options_list, key=lambda o: len(tuples(o) & needed))  # max keeps the first
        chosen.append(best)
        needed -= tuples(best)
    return chosen


COVERING = covering_set()  # every pair of values: the everyday tier renders these
TRIPLES = covering_set(strength=3)  # every three values: the proof tier renders these too


# The tiers. The everyday tier (`python -m pytest -n 2`, what a contributor runs after each
# change) renders, lints, imports and trains COVERING and runs one generated project a task;
# the proof tier (`--proof`) runs what proves the rules hold (tests marked `proof`: mutants,
# equivalents, the generated suites of the whole covering set) and renders the three-way set
# beyond COVERING (every combination with --all). Tests marked `tiered` are parametrised over
# RENDERED and run in both tiers, each on its own combinations: pytest_configure chooses them
# before any test module is imported, so a module-level parametrize sees the tier's list.
RENDERED = COVERING


def pytest_addoption(parser):
    group = parser.getgroup("scaffold tiers")
    group.addoption(
        "--proof",
        action="store_true",
        help="run the proof tier (mutants, equivalents, every generated suite of the covering "
        "set, the three-way renders) instead of the everyday tier",
    )
    group.addoption(
        "--all",
        action="store_true",
        dest="all_combinations",
        help="with --proof: render, lint, import and train every combination (for a release)",
    )


def _controller(config) -> bool:
    """The process that runs the session: not an xdist worker."""
    return not hasattr(config, "workerinput")


def pytest_sessionstart(session):
    if proof_tier(session.config) and _controller(session.config):
        from tests import tables

        tables.clear_results()


def pytest_sessionfinish(session, exitstatus):
    """After a proof run that ran every mutant (or every rewrite), rewrite its table in docs/."""
    if not (proof_tier(session.config) and _controller(session.config)):
        return
    from tests import equivalents, mutants, tables

    for suite, module in (("mutants", mutants), ("equivalents", equivalents)):
        if module.write_recorded_table():
            print(f"\nproof tier: wrote {suite} table (docs/)")
        elif tables.recorded(suite):
            print(f"\nproof tier: {suite} table not written: not every case ran")


def proof_tier(config) -> bool:
    return bool(config.getoption("--proof", default=False))


def wider_renders(all_combinations: bool) -> list:
    """What the proof tier renders: the three-way set, or every combination, less COVERING."""
    return [o for o in (COMBOS if all_combinations else TRIPLES) if o not in COVERING]


# Tests that run a generated project's own suite in a child pytest: minutes each.
LONGEST = (
    "test_generated_suite_passes",
    "test_generated_default_tier_passes_and_leaves_the_probes_out",
)
# Single tests of the proof tier that take most of a minute or more (CI's --durations,
# 2026-12-07): started after LONGEST and before the many short ones, so that none of them is
# the last test left running while the other worker has nothing to take.
LONG = (
    "test_mutation_suite_bugs_in_generated_projects",  # 148 s
    "test_a_small_cnn_on_real_reviews_is_within_two_points_of_tfidf",  # 69 s
    "test_quick_benchmark_writes_a_table_and_a_chart",  # 54 s
    "test_quick_tabular_benchmarks_read_and_train_a_mixed_table",  # 47 s
    "test_quick_tracking_cost_benchmark_writes_its_table",  # 46 s
)


def pytest_collection_modifyitems(config, items):
    """Keep the tier's tests: those marked `proof` in the proof tier only, the others in the
    everyday tier only, and those marked `tiered` in both."""
    proof = proof_tier(config)
    keep, drop = [], []
    for item in items:
        tiered = item.get_closest_marker("tiered") is not None
        in_proof = item.get_closest_marker("proof") is not None
        (keep if tiered or in_proof == proof else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep

    # The longest first: generated projects' whole suites take minutes each. Left in file order
    # they came last and one worker ran them one after another while the other sat idle (20
    # minutes at the proof tier's end on 2026-12-06); started first, the short tests fill in
    # around them, and --dist worksteal (pyproject.toml) hands a busy worker's queue to an idle one.
    def rank(item) -> int:
        name = getattr(item, "originalname", item.name)
        return 0 if name in LONGEST else 1 if name in LONG else 2

    items.sort(key=rank)


def combo_numbers(options: Options) -> str:
    """The numeric answers that shape the project, e.g. 'seed=0 patience=5'."""
    used = options.answers()
    names = ("seed", "plateau_patience", "max_grad_norm", "patience", "ema_decay")
    return " ".join(f"{name}={used[name]}" for name in names if name in used)


def pytest_report_header(config):
    lines = [f"{combo_id(o)}: {combo_numbers(o)}" for o in COMBOS]
    tier = "proof" if proof_tier(config) else "everyday"
    return (
        [f"combination numbers (fixed spread, tests/conftest.py), {len(COMBOS)} combinations:"]
        + ["  " + "; ".join(lines[i : i + 4]) for i in range(0, len(lines), 4)]
        + [f"pairwise covering set ({len(COVERING)}): " + ", ".join(map(combo_id, COVERING))]
        + [f"three-way covering set ({len(TRIPLES)}): " + ", ".join(map(combo_id, TRIPLES))]
        + [f"tier: {tier}; rendered, linted, imported and trained here ({len(RENDERED)}): "
           + ", ".join(map(combo_id, RENDERED))]
    )  # fmt: skip


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


def run_in_project(argv: list[str], project: Path, options: Options, timeout: float = 300):
    """`python ARGV` in a generated project: a fresh interpreter for the covering set, whose
    runs are the everyday tier's; for the proof tier's wider renders, a fork of one that has
    imported torch once (tests/forkrun.py), which saves about 2 s of each run's 4-8 s."""
    if options in COVERING:
        return run([PYTHON, *argv], project, env=project_env(), timeout=timeout)
    from tests import forkrun

    env = {"PYTHONPATH": "src", "OMP_NUM_THREADS": "1"}  # as project_env() sets them
    return forkrun.run_python(argv, project, env=env, timeout=timeout)


PYTHON = sys.executable
