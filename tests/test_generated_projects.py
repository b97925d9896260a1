"""Generated projects' own test suites pass, and every rendered combination's training command
writes what it promises.

A generated project has two tiers of its own: its default `pytest` (contract tests, the overfit
check, reproducibility and the tests that guard a user's edits: a minute on one core) and
`pytest -m probe` (bad input, exit codes, Ctrl-C, kills and resumes). The everyday tier runs one
project's default tier per task; the proof tier runs the probes of those projects and both tiers
of the rest of the covering set, so every suite of the covering set runs whole in CI.
"""

import csv
import dataclasses
import re

import pytest

from tests.conftest import (
    COMBOS,
    COVERING,
    PYTHON,
    RENDERED,
    REPO,
    TASKS,
    combo_id,
    project_env,
    run,
    run_in_project,
)

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
# combination until fixed (a flaky test cannot be checked to fail still). The SIGTERM-to-
# torchrun race of 2026-12-03 (rank 1, stopping first, removed rank 0's temporary file or the
# empty --out while rank 0 saved into it) is fixed.
# One now, found by a fresh-clone CI run on 2026-12-08 (reg-plateau-amp-clip-es-ddp-ema-
# ga3-wu4; it passed in the other runs of that day and in stop 41's CI). After an agreed stop
# on rank 1's SIGHUP, rank 1 exits (129) while rank 0 still writes the step's checkpoint;
# torchrun then sends SIGTERM to rank 0, which takes it for a second signal and stops
# mid-write ("stopped by SIGTERM ..., no epoch was saved"). A product race of the launcher,
# not of the test: the fix is for ranks that stopped together to wait for each other before
# they exit (a barrier in distributed.stop after an agreed stop). The [agreeing] case, which
# tests/mutants.py's M8 mutant runs, stays in.
KNOWN_FLAKY: tuple[str, ...] = (
    "tests/test_distributed.py::"
    "test_a_signal_to_one_rank_inside_an_epoch_stops_both_and_resumes_to_the_same_bits[3]",
)
# Generated test files of shared code (byte-identical in every render: test_render's
# SHARED_FILES) whose behaviour depends only on the task, and which are expensive: they run in
# ONE_PER_TASK's suites only. test_tune.py runs about twenty short trainings in child processes
# (a minute and a half of CPU); tune.py drives the task's own train command and nothing else.
ONCE_PER_TASK: tuple[str, ...] = ("tests/test_tune.py",)
# Of those, the tests of a study's storage and workers (a new database opened by many workers
# at once, two workers on one study, a dead worker's trial run again, a sweep cut by Ctrl-C or
# a kill) run in the first task's suite only: the task enters them only as the command a
# trial starts, whose own stops and resumes every suite's test_stop_signals.py and
# test_resume_guards.py test. About 90 s of CPU saved in each other task's suite.
ONCE_IN_ALL: tuple[str, ...] = tuple(
    f"tests/test_tune.py::{name}"
    for name in (
        "test_workers_opening_a_new_database_at_once_all_get_it",
        "test_two_workers_on_one_study_never_run_a_trial_twice",
        "test_a_trial_runs_again_exactly_when_its_worker_is_dead",
        "test_a_study_goes_on_after_an_interruption_and_reruns_the_cut_trial",
    )
)
# Probes of the launcher and of code every torchrun render shares, whatever the task and the
# other options: the rendezvous of two agents, the refusal of machines that see different
# checkpoints or of a global batch smaller than the processes, a failing rank stopping the
# others. They run in the first torchrun suite of the covering set only (about 50 s of CPU
# saved in each other one); the stops that save and resume (SIGTERM, kills, a signal to one
# rank), whose code paths differ with EMA, AMP and accumulation, run in every torchrun suite.
ONCE_IN_DISTRIBUTED: tuple[str, ...] = tuple(
    f"tests/test_distributed_stops.py::{name}"
    for name in (
        "test_two_machines_train_as_two_processes_on_one",
        "test_M8_machines_that_see_different_checkpoints_are_refused",
        "test_M8_a_rank_that_fails_stops_the_others",
        "test_a_global_batch_smaller_than_the_processes_is_refused_at_start",
    )
)
FIRST_DISTRIBUTED = next(o for o in COVERING if o.distributed and not o.compile)
# A combination with compile runs its default tier and tests/test_compile.py, and leaves its
# other probes to the combinations without compile, when its code with compile false is its
# eager twin's (the same answers, compile false): every generated test but test_compile.py's
# trains eager (the project's conftest sets compile=false), so those probes would run the
# twin's code again, which the probes of the combinations without compile cover. Compile then
# adds the tests of what it changes, not a second copy of every probe, as it adds mutants
# (tests/mutants.py, needed()). eager_twin_differences decides it from the two renders; where
# they differ otherwise (the text task pads batches to powers of two for the compiled model,
# in code that runs eager too) the suite runs whole.
COMPILED = "compiled"
COMPILE_TESTS = ("tests/test_compile.py",)


# Where a compile render may differ from its eager twin: the module that compiles, its test.
COMPILE_ONLY_FILES = {"src/PKG/compiling.py", "tests/test_compile.py"}


def without_compile(text: str) -> list[str]:
    """A file's code lines less those that name compile, the compiled modules read as what they
    wrap and the tests' compile=False left out: the code that runs when compile is false.

    A line that names compile is taken to act only when compile is true (`if cfg.compile:`, its
    import, the module it builds). One that replaces a line of the twin still shows, as the
    twin's line is then missing; an added line that names compile and acts with compile false
    would not: the compile code is written so that none does."""
    lines = []
    for line in text.splitlines():
        code = line.split("  #")[0].rstrip()  # a trailing comment is no code
        code = code.replace(", compile=False", "").replace("compiled_ema", "ema.module")
        code = code.replace("compiled", "model")
        if code.strip() and not code.lstrip().startswith("#") and "compil" not in code.lower():
            lines.append(code)
    return lines


def project_files(project) -> dict[str, str]:
    """The project's Python files by path, its package and project names replaced."""
    package = next(p for p in (project / "src").iterdir() if p.is_dir())
    return {
        path.relative_to(project).as_posix().replace(package.name, "PKG"): path.read_text()
        .replace(package.name, "PKG")
        .replace(project.name, "PROJECT")
        for path in [*project.glob("tests/*.py"), *package.glob("*.py")]
    }


def eager_twin_differences(compiled: dict[str, str], eager: dict[str, str]) -> list[str]:
    """The files of a compile render (project_files) that, with compile false, run other code
    than its eager twin's: [] when its eager tests would only repeat the twin's."""
    unexplained = set(compiled) ^ set(eager) ^ COMPILE_ONLY_FILES  # files added or missing
    if unexplained:
        return sorted(unexplained)
    return sorted(
        name for name in eager if without_compile(compiled[name]) != without_compile(eager[name])
    )


def run_suite(project, marks: str | None, options=None, paths: tuple[str, ...] = ()):
    command = [PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider", *paths]
    command += ["-m", marks] if marks is not None else []
    for combo, node in KNOWN_FAILURES:
        if options is not None and combo == combo_id(options):
            command += ["--deselect", node]
    if options is not None and options.distributed:
        command += [f"--deselect={node}" for node in KNOWN_FLAKY]
        if options != FIRST_DISTRIBUTED:
            command += [f"--deselect={node}" for node in ONCE_IN_DISTRIBUTED]
    if options is not None and options not in ONE_PER_TASK:
        command += [f"--deselect={path}" for path in ONCE_PER_TASK]
    elif options is not None and options != ONE_PER_TASK[0]:
        command += [f"--deselect={node}" for node in ONCE_IN_ALL]
    result = run(command, project, env=project_env(), timeout=1200)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    summary = result.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "failed" not in summary and "skipped" not in summary, summary
    return summary


def test_the_tests_run_once_name_tests_of_the_template():
    # --deselect takes a node id's prefix and says nothing when none matches: a renamed test
    # would otherwise run everywhere, or (in ONCE_IN_ALL, with its file gone) nowhere.
    for node in (*ONCE_PER_TASK, *ONCE_IN_ALL, *ONCE_IN_DISTRIBUTED):
        path, _, name = node.partition("::")
        folder, _, file = path.rpartition("/")
        # The file's template, named as it renders or under a condition ("{% if ... %}name").
        found = [
            t
            for t in (REPO / "template" / folder).iterdir()
            if t.name in (file, f"{file}.jinja") or f"%}}{file}{{%" in t.name
        ]
        assert len(found) == 1, node
        assert not name or f"def {name}(" in found[0].read_text(), node


@pytest.mark.parametrize("options", ONE_PER_TASK, ids=combo_id)
def test_generated_default_tier_passes_and_leaves_the_probes_out(render_combo, options):
    summary = run_suite(render_combo(options).dest, None, options)  # known failures left out
    # The probes are there, and left to `pytest -m probe`.
    assert " deselected" in summary, summary


@pytest.mark.proof
@pytest.mark.parametrize(
    "options, marks",
    [(o, "probe") for o in ONE_PER_TASK] + [(o, COMPILED if o.compile else ALL) for o in REST],
    ids=lambda v: (
        combo_id(v)
        if not isinstance(v, str)
        else {"probe": "probes", ALL: "all", COMPILED: "compiled"}[v]
    ),
)
def test_generated_suite_passes(render_combo, options, marks):
    assert not any(o.compile for o in ONE_PER_TASK)  # their probes run whole
    project = render_combo(options).dest
    if marks == COMPILED:
        twin = render_combo(dataclasses.replace(options, compile=False)).dest
        if not eager_twin_differences(project_files(project), project_files(twin)):
            run_suite(project, "not probe", options)  # the default tier, on the compile render
            summary = run_suite(project, "probe", options, paths=COMPILE_TESTS)
            assert " deselected" not in summary, summary  # every test of test_compile.py ran
            return
        marks = ALL
    summary = run_suite(project, marks, options)
    known = [node for combo, node in KNOWN_FAILURES if combo == combo_id(options)]
    known += list(KNOWN_FLAKY) if options.distributed else []
    known += list(ONCE_PER_TASK) if options not in ONE_PER_TASK else []
    if options.distributed and options != FIRST_DISTRIBUTED:
        known += list(ONCE_IN_DISTRIBUTED)
    if marks == ALL:
        assert (" deselected" in summary) == bool(known), summary


@pytest.mark.proof
@pytest.mark.parametrize("options", [o for o in REST if o.compile], ids=combo_id)
def test_eager_twin_differences_finds_each_change_that_runs_with_compile_false(
    render_combo, options
):
    compiled = project_files(render_combo(options).dest)
    eager = project_files(render_combo(dataclasses.replace(options, compile=False)).dest)
    found = eager_twin_differences(compiled, eager)
    # The text task pads its batches for the compiled model in code that runs eager too.
    text = options.task == "text-classification"
    assert found == (["src/PKG/data.py", "tests/test_data.py"] if text else [])
    edited = dict(compiled)
    edited["src/PKG/engine.py"] += "\nSTEPS = 2\n"  # any code that is not about compile
    assert "src/PKG/engine.py" in eager_twin_differences(edited, eager)
    edited = dict(compiled)
    edited["src/PKG/engine.py"] += "\n# a comment\nX = compile_model  # compile only\n"
    assert eager_twin_differences(edited, eager) == found
    del edited["src/PKG/compiling.py"]
    assert "src/PKG/compiling.py" in eager_twin_differences(edited, eager)


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
    command = ["-m", f"{package}.train", "--epochs", "3", "--out", "run", "--seed", seed]
    if options.compile and options not in COVERING:
        # Compiling takes most of a minute a run: the covering set's compile combinations train
        # compiled here, the wider renders (the proof tier's) train eager.
        command += ["--set", "compile=false"]
    result = run_in_project(command, project, options)
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
