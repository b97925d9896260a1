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
    command = [PYTHON, "-m", f"{package}.train", "--epochs", "3", "--out", "run"]
    result = run(command, project, env=project_env())
    assert result.returncode == 0, result.stderr
    with open(project / "run" / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [row["epoch"] for row in rows] == ["1", "2", "3"]
    assert (project / "run" / "last.pt").stat().st_size > 0
    assert (project / "run" / "best.pt").stat().st_size > 0
    assert len(result.stdout.strip().splitlines()) == 4  # three epoch lines and a summary
    losses = [float(row["train_loss"]) for row in rows]
    assert losses[-1] < losses[0]
