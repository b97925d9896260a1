"""Every combination's own test suite passes, and its training command writes what it promises."""

import csv

import pytest

from tests.conftest import COMBOS, PYTHON, combo_id, project_env, run

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("options", COMBOS, ids=combo_id)
def test_generated_test_suite_passes(render_combo, options):
    project = render_combo(options).dest
    command = [PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    result = run(command, project, env=project_env())
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    summary = result.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "failed" not in summary and "skipped" not in summary, summary


@pytest.mark.parametrize("options", COMBOS, ids=combo_id)
def test_train_command_writes_metrics_and_checkpoints(render_combo, options):
    project = render_combo(options).dest
    package = project.name.replace("-", "_")
    # A seed of its own per combination, so a result that holds only for one seed shows up.
    seed = str(101 + 37 * COMBOS.index(options))
    command = [PYTHON, "-m", f"{package}.train", "--epochs", "3", "--out", "run", "--seed", seed]
    result = run(command, project, env=project_env())
    assert result.returncode == 0, result.stderr
    with open(project / "run" / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [row["epoch"] for row in rows] == ["1", "2", "3"]
    assert (project / "run" / "last.pt").stat().st_size > 0
    assert (project / "run" / "best.pt").stat().st_size > 0
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 5, lines  # the model's size, three epoch lines and a summary
    assert lines[0].startswith("model: ") and " parameters; each checkpoint about " in lines[0]
    losses = [float(row["train_loss"]) for row in rows]
    assert losses[-1] < losses[0]
