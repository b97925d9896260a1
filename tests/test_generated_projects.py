"""Generated projects' own test suites pass, and every combination's training command writes
what it promises.

The suites run on every combination while there are few enough (tests/conftest.py,
SUITE_COMBOS), else on the pairwise covering set; pytest's header says which.
"""

import csv

import pytest

from tests.conftest import COMBOS, PYTHON, SUITE_COMBOS, combo_id, project_env, run

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("options", SUITE_COMBOS, ids=combo_id)
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
    # The model's size, three epoch lines and a summary; a task may say first how it reads its
    # data (the image task names the path it took).
    *before, model, e1, e2, e3, summary = result.stdout.strip().splitlines()
    assert model.startswith("model: ") and " parameters; each checkpoint about " in model
    assert [e1[:11], e2[:11], e3[:11]] == ["epoch   1/3", "epoch   2/3", "epoch   3/3"]
    assert summary.startswith("best val_loss ") and len(before) <= 2, before
    losses = [float(row["train_loss"]) for row in rows]
    assert losses[-1] < losses[0]
