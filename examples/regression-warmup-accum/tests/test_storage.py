"""A table over the memory budget trains from a memory-mapped file, with the same results."""

import csv
import dataclasses
import random

import pytest
import torch

from regression_warmup_accum.storage import (
    Rows,
    Storage,
)
from regression_warmup_accum.train import fit

# Probes, all (`pytest -m probe`): the disk path for tables larger than memory.
pytestmark = pytest.mark.probe


def write_table(path, seed: int, rows: int) -> str:
    """Numbers with missing cells (so a second matrix, with indicator columns, is made too),
    a text column, and a target."""
    rng = random.Random(seed)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["a", "b", "color", "target"])
        for _ in range(rows):
            a, color = rng.gauss(0, 1), rng.choice(["red", "green", "blue", ""])
            b = "" if rng.random() < 0.1 else round(rng.gauss(5, 2), 4)
            target = round(2 * a + (color == "red") + rng.gauss(0, 0.1), 4)
            writer.writerow([round(a, 4), b, color, target])
    return str(path)


@pytest.mark.parametrize("seed", [0, 1])
def test_the_disk_path_gives_the_memory_paths_results_bitwise(cfg, tmp_path, capsys, seed):
    path = write_table(tmp_path / "t.csv", seed, 400)
    runs = {}
    for budget in (4096, 0):  # 0: every table is over the budget
        out = tmp_path / f"run{budget}"
        run = dataclasses.replace(
            cfg, data=path, memory_budget_mb=budget, out=str(out), seed=seed, device="cpu"
        )
        runs[budget] = fit(run)
        said = [line for line in capsys.readouterr().out.splitlines() if line.startswith("data:")]
        assert ("memory-mapped from a file in" in said[-1]) == (budget == 0), said
        # The mapped file was unlinked when made: nothing is left beside the run's files.
        assert sorted(p.name for p in out.iterdir()) == ["best.pt", "last.pt", "metrics.csv"]
    memory, disk = runs[4096], runs[0]
    assert isinstance(disk["data"].train.features, Rows)
    assert isinstance(memory["data"].train.features, torch.Tensor)
    assert memory["history"] == disk["history"]
    weights = [run["model"].state_dict() for run in (memory, disk)]
    assert all(torch.equal(a, weights[1][name]) for name, a in weights[0].items())


def test_rows_read_like_the_tensor_of_those_rows(tmp_path):
    storage = Storage(0, tmp_path)
    matrix = torch.from_numpy(storage.matrix(50, 3))
    matrix.copy_(torch.arange(150, dtype=torch.float32).view(50, 3))
    assert storage.on_disk and list(tmp_path.iterdir()) == []  # mapped, and already unlinked
    rows = torch.randperm(50, generator=torch.Generator().manual_seed(0))[:20]
    view, copy = Rows(matrix, rows), matrix[rows]
    assert len(view) == 20 and view.shape == (20, 3)
    index = torch.tensor([5, 0, 19, 5])
    assert torch.equal(view[index], copy[index])
    assert torch.equal(view[3:9], copy[3:9])
    assert torch.equal(view.to("cpu")[index], copy[index])
