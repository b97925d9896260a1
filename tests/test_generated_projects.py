"""Generated projects' own test suites pass, and every rendered combination's training command
writes what it promises.

A generated project has two tiers of its own: its default `pytest` (contract tests, the overfit
check, reproducibility and the tests that guard a user's edits: a minute on one core) and
`pytest -m probe` (bad input, exit codes, Ctrl-C, kills and resumes). The everyday tier runs one
project's default tier per task; the proof tier runs the probes of those projects and both tiers
of the rest of the covering set, so every suite of the covering set runs whole in CI.
"""

import csv
import re

import pytest

from tests.conftest import COMBOS, COVERING, PYTHON, RENDERED, TASKS, combo_id, project_env, run

pytestmark = pytest.mark.slow

# One project a task: the first of the covering set with it (the defaults come first).
ONE_PER_TASK = [next(o for o in COVERING if o.task == task) for task in TASKS]
REST = [o for o in COVERING if o not in ONE_PER_TASK]
ALL = "probe or not probe"

# Generated tests known to fail on one combination, found by the proof tier and not fixed yet:
# (combination, test) -> a pattern of the failing assertion as pytest prints it. Left out of
# that suite's run, and checked to fail still by test_a_known_failure_still_fails (which fails
# once it is fixed, so this list stays true).
# None now. The last three were fixed at their roots on 2026-12-03: the image shapes' colouring
# and the text task's two-process tolerance (see their task_cases.py); and with --ema, a model
# left with an inf BatchNorm variance is now reported as a training failure, checked before the
# average is validated (validation saw only its nan).
KNOWN_FAILURES: dict[tuple[str, str], str] = {}
# Generated tests that fail now and then, left out of the proof tier's suites on every
# combination until fixed (a flaky test cannot be checked to fail still). None now: the
# SIGTERM-to-torchrun race (rank 1, stopping first, removed rank 0's temporary file or the
# empty --out while rank 0 saved into it) was fixed on 2026-12-03.
KNOWN_FLAKY: tuple[str, ...] = ()
# Generated test files of shared code (byte-identical in every render: test_render's
# SHARED_FILES) whose behaviour depends only on the task, and which are expensive: they run in
# ONE_PER_TASK's suites only. test_tune.py runs about twenty short trainings in child processes
# (a minute and a half of CPU); tune.py drives the task's own train command and nothing else.
ONCE_PER_TASK: tuple[str, ...] = ("tests/test_tune.py",)


def run_suite(project, marks: str | None, options=None):
    command = [PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    command += ["-m", marks] if marks is not None else []
    for combo, node in KNOWN_FAILURES:
        if options is not None and combo == combo_id(options):
            command += ["--deselect", node]
    if options is not None and options.distributed:
        command += [f"--deselect={node}" for node in KNOWN_FLAKY]
    if options is not None and options not in ONE_PER_TASK:
        command += [f"--deselect={path}" for path in ONCE_PER_TASK]
    result = run(command, project, env=project_env(), timeout=1200)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    summary = result.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "failed" not in summary and "skipped" not in summary, summary
    return summary


@pytest.mark.parametrize("options", ONE_PER_TASK, ids=combo_id)
def test_generated_default_tier_passes_and_leaves_the_probes_out(render_combo, options):
    summary = run_suite(render_combo(options).dest, None, options)  # known failures left out
    # The probes are there, and left to `pytest -m probe`.
    assert " deselected" in summary, summary


@pytest.mark.proof
@pytest.mark.parametrize(
    "options, marks",
    [(o, "probe") for o in ONE_PER_TASK] + [(o, ALL) for o in REST],
    ids=lambda v: combo_id(v) if not isinstance(v, str) else ("probes" if v == "probe" else "all"),
)
def test_generated_suite_passes(render_combo, options, marks):
    summary = run_suite(render_combo(options).dest, marks, options)
    known = [node for combo, node in KNOWN_FAILURES if combo == combo_id(options)]
    known += list(KNOWN_FLAKY) if options.distributed else []
    known += list(ONCE_PER_TASK) if options not in ONE_PER_TASK else []
    if marks == ALL:
        assert (" deselected" in summary) == bool(known), summary


@pytest.mark.proof
@pytest.mark.parametrize("combo, node", list(KNOWN_FAILURES), ids=lambda v: v.split("::")[-1])
def test_a_known_failure_still_fails(render_combo, combo, node):
    found = [o for o in COVERING if combo_id(o) == combo]
    assert found, (
        f"{combo} is no longer in the covering set (a new switch changes it): run {node} on the "
        "combinations that now have these options, and update KNOWN_FAILURES"
    )
    (options,) = found
    command = [PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", ALL, node]
    result = run(command, render_combo(options).dest, env=project_env(), timeout=1200)
    assert result.returncode == 1, (
        f"{node} passes on {combo} now: remove it from KNOWN_FAILURES\n" + result.stdout[-2000:]
    )
    assert re.search(KNOWN_FAILURES[combo, node], result.stdout), result.stdout[-2000:]


@pytest.mark.tiered
@pytest.mark.parametrize("options", RENDERED, ids=combo_id)
def test_train_command_writes_metrics_and_checkpoints(render_combo, options):
    project = render_combo(options).dest
    package = project.name.replace("-", "_")
    # A seed of its own per combination, so a result that holds only for one seed shows up.
    seed = str(101 + 37 * COMBOS.index(options))
    command = [PYTHON, "-m", f"{package}.train", "--epochs", "3", "--out", "run", "--seed", seed]
    if options.compile and options not in COVERING:
        # Compiling takes most of a minute a run: the covering set's compile combinations train
        # compiled here, the wider renders (the proof tier's) train eager.
        command += ["--set", "compile=false"]
    result = run(command, project, env=project_env())
    assert result.returncode == 0, result.stderr
    with open(project / "run" / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [row["epoch"] for row in rows] == ["1", "2", "3"]
    assert (project / "run" / "last.pt").stat().st_size > 0
    assert (project / "run" / "best.pt").stat().st_size > 0
    # The model's size, three epoch lines and a summary; a task may say first how it reads its
    # data (the image task names the path it took).
    *before, model, e1, e2, e3, summary = result.stdout.strip().splitlines()
    assert model.startswith("model: ") and " parameters; each checkpoint about " in model
    assert [e1[:11], e2[:11], e3[:11]] == ["epoch   1/3", "epoch   2/3", "epoch   3/3"]
    assert summary.startswith("best val_loss ") and len(before) <= 2, before
    losses = [float(row["train_loss"]) for row in rows]
    assert losses[-1] < losses[0]
