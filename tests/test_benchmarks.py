"""The benchmark's quick mode runs end to end, so its code cannot rot (no speed is asserted)."""

import re

import pytest

from tests.conftest import PYTHON, REPO, TASKS, run

# The proof tier: minutes of training, kept out of the everyday run.
pytestmark = [pytest.mark.slow, pytest.mark.proof]


def test_quick_benchmark_writes_a_table_and_a_chart(tmp_path):
    result = run(
        [PYTHON, "benchmarks/run.py", "--quick", "--out", str(tmp_path)], REPO, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    table = (tmp_path / "results.md").read_text()
    # Every task in copier.yml is measured, and the settings that gave its size are stated.
    sizes = next(line for line in table.splitlines() if "Sizes: " in line)
    for task in TASKS:
        assert re.search(rf"(Sizes: |; ){re.escape(task)} default = \w+ \d", sizes), sizes
    assert f"Sizes: {TASKS[0]} default = n_samples 512, " in sizes  # quick mode's size
    for loop in (
        "(a) floor",
        "(b) generated",
        "(b) generated, clipping",
        "(c) textbook DataLoader",
    ):
        for task in TASKS:
            assert re.search(
                rf"\| {re.escape(task)} default \| {re.escape(loop)} \| \d+\.\d\d \(", table
            ), loop
    # A task's own benchmark module adds its rows: for images, the textbook image-folder loop
    # (files decoded per item) and the decode and cached-start timings.
    for workers in (0, 2):
        row = f"(c) textbook image folder + DataLoader, {workers} workers"
        assert re.search(rf"\| image-classification default \| {re.escape(row)} \| \d", table)
    assert re.search(r"\| \d+ PNG files decoded into memory .*\| \d+\.\d\d \(", table), table
    assert re.search(r"\| the same \d+ images loaded from the cache .*\| \d+\.\d\d", table)
    assert "| ratio scaffold new / copier copy |" in table and "| scaffold --help |" in table
    assert "torch " in table.splitlines()[2]  # the machine line names torch and its threads
    assert (tmp_path / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The text task's module: a floor over the same padded batches (replacing the generic one),
    # the unbucketed generated loop and the pad-per-batch textbook loader with their padding
    # shares, and epoch timings on long-tailed documents.
    group = r"\| text-classification default \| "
    assert re.search(group + r"\(a\) floor \| 1\.00 \(", table), table
    unbucketed = re.search(
        group + r"\(b\) generated, unbucketed \(bucket_batches 1: (\d+)% padding, "
        r"bucketed 50: (\d+)% padding\) \| \d+\.\d\d \(",
        table,
    )
    assert unbucketed, table
    assert int(unbucketed[1]) > int(unbucketed[2])  # bucketing pads less
    assert re.search(group + r"\(c\) textbook DataLoader, pad_sequence per batch .*\| \d", table)
    for row in ("epoch, floor over the same", "epoch, generated, bucketed (", "unbucketed ("):
        assert re.search(group + r".*" + re.escape(row) + r".*\| \d+\.\d\d \(", table), row
    assert "long-tailed documents (lognormal lengths" in table


def test_quick_distributed_benchmark_writes_its_table(tmp_path):
    result = run(
        [PYTHON, "benchmarks/distributed.py", "--quick", "--out", str(tmp_path)],
        REPO,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    table = (tmp_path / "distributed.md").read_text()
    for row in (
        "distributed project, python -m (no torchrun), 1 thread: speed / plain 1 thread",
        "distributed project, torchrun 1 process: speed / plain 1 thread",
        "distributed project, torchrun 2 processes (gloo): speed / plain 1 thread",
        "torchrun 2 processes: speed / plain ",
    ):
        assert re.search(rf"\| default \| {re.escape(row)}.* \| \d+\.\d\d \(", table), row


def test_quick_tabular_benchmarks_read_and_train_a_mixed_table(tmp_path):
    # The reader benchmark: every reader row, mixed files and the disk path included.
    result = run(
        [PYTHON, "benchmarks/tabular_read.py", "--quick", "--out", str(tmp_path)], REPO, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    table = (tmp_path / "tabular_read.md").read_text()
    for reader in ("old: csv module", "new: Arrow, CSV |", "into a memory-mapped file", "mixed"):
        assert re.search(rf"\| 2,000 .*{re.escape(reader)}.*\| \d+\.\d\dx? ", table), reader
    # End to end: CSV, Parquet and the disk path train; the disk path's metrics equal memory's.
    result = run(
        [PYTHON, "benchmarks/tabular_fit.py", "--quick", "--out", str(tmp_path)], REPO, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = (tmp_path / "tabular_fit.md").read_text()
    assert "The disk path's metrics.csv equals the memory path's: True." in report
    assert "memory-mapped from a file in" in report and "predict on 5,000 new rows" in report


def test_quick_ema_benchmark_writes_its_table(tmp_path):
    result = run(
        [PYTHON, "benchmarks/ema_cost.py", "--quick", "--out", str(tmp_path)], REPO, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    table = (tmp_path / "ema_cost.md").read_text()
    assert "Command: `python benchmarks/ema_cost.py --quick --out " in table
    number = r"-?\d+\.\d\d \(-?\d+\.\d\d--?\d+\.\d\d\)"
    for task in TASKS:
        row = rf"\| {re.escape(task)} \| [\d,]+ parameters in \d+ floating-point tensors; [^|]+"
        assert re.search(row + rf"(\| {number} ){{4}}\| \d+\.\d%", table), task


def test_quick_warmup_benchmark_writes_its_table(tmp_path):
    result = run(
        [PYTHON, "benchmarks/warmup_cost.py", "--quick", "--out", str(tmp_path)], REPO, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    table = (tmp_path / "warmup_cost.md").read_text()
    assert "Command: `python benchmarks/warmup_cost.py --quick --out " in table
    number = r"-?\d+\.\d\d \(-?\d+\.\d\d--?\d+\.\d\d\)"
    for task in TASKS:
        for schedule in ("WarmupCosine (cosine)", "LinearWarmup (plateau)"):
            row = rf"\| {re.escape(task)} \| {re.escape(schedule)} \| [\d,]+ parameters; [^|]+"
            assert re.search(row + rf"(\| {number} ){{4}}\| \d+\.\d%", table), (task, schedule)


def test_quick_epoch_costs_benchmark_writes_its_table(tmp_path):
    result = run(
        [PYTHON, "benchmarks/epoch_costs.py", "--quick", "--out", str(tmp_path)],
        REPO,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    table = (tmp_path / "epoch_costs.md").read_text()
    assert "Command: `python benchmarks/epoch_costs.py --quick --out " in table
    number = r"\d+\.\d\d \(\d+\.\d\d-\d+\.\d\d\)"
    for task in TASKS:
        for row in (
            "generated train_one_epoch / minimal loop, same fused AdamW and batches",
            "whole fit (checkpoint_every_s 10, the default) / minimal train+validate",
            "whole fit (checkpoint_every_s 0: every epoch written) / minimal train+validate",
        ):
            assert re.search(rf"\| {re.escape(task)} \| {re.escape(row)} \| {number} \|", table)
        for step in (
            "evaluate (validation pass with the task's metrics, batches of 256)",  # 4 x 64
            "evaluate in training-sized batches (64)",
            "write_metrics (metrics.csv, not fsync'd)",
            "save_checkpoint last.pt (fsync'd)",
            "save_checkpoint last.pt without fsync",
            "best.pt: a second save_checkpoint",
            "best.pt: link_checkpoint to last.pt",
            "copy of an epoch kept in memory, not written",
        ):
            assert re.search(
                rf"\| {re.escape(task)} \| \| {re.escape(step)} \| \d+\.\d\d \| ", table
            )
        signed = r"-?\d+\.\d\d \(-?\d+\.\d\d--?\d+\.\d\d\)"
        for row in (
            "fit beyond the minimal script, per epoch",
            "fit beyond training: validation, metrics, checkpoints, per epoch",
        ):
            assert re.search(rf"\| {re.escape(task)} \| \| {re.escape(row)} \| {signed} \| ", table)


def test_quick_grad_accum_benchmark_writes_its_table(tmp_path):
    # One task keeps it under a minute; the 2-process part runs too, so its worker cannot rot.
    command = ["benchmarks/grad_accum.py", "--quick", "--tasks", "classification"]
    result = run([PYTHON, *command, "--out", str(tmp_path)], REPO, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    table = (tmp_path / "grad_accum.md").read_text()
    assert "Command: `python benchmarks/grad_accum.py --quick --tasks classification" in table
    number = r"\d+\.\d+ \(\d+\.\d+-\d+\.\d+\)"
    for loop in ("grad_accum 4, batches of 64", "grad_accum 1, batches of 256"):
        assert re.search(rf"\| {re.escape(loop)} \| {number} \|", table), loop
    for loop in ("no_sync on all but a window's last batch", "all-reduce on every batch"):
        assert re.search(rf"\| {re.escape(loop)} \| {number} \|", table), loop


def test_quick_export_speed_benchmark_writes_its_table(tmp_path):
    result = run(
        [PYTHON, "benchmarks/export_speed.py", "--quick", "--out", str(tmp_path)],
        REPO,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    table = (tmp_path / "export_speed.md").read_text()
    assert "Command: `python benchmarks/export_speed.py --quick --out " in table
    number = r"[\d,]+ \([\d,]+-[\d,]+\)"
    for task in TASKS:
        for batch in (r"\d+", "1"):
            row = rf"\| {re.escape(task)} \| {batch} \| {number} \| {number} \| {number} \| "
            assert re.search(row + r"\d+\.\d\dx \|", table), (task, batch)


def test_quick_compile_benchmark_writes_its_table(tmp_path):
    # One task: compiling with an empty cache takes most of a minute on its own.
    command = ["benchmarks/compile.py", "--quick", "--tasks", "classification"]
    result = run([PYTHON, *command, "--out", str(tmp_path)], REPO, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    table = (tmp_path / "compile.md").read_text()
    assert "Command: `python benchmarks/compile.py --quick --tasks classification" in table
    rate = r"\d+\.\d \(\d+\.\d-\d+\.\d\)"
    row = r"\| classification \| [\d,]+ parameters; [^|]+\| -?\d+\.\d \| \d+ "
    ratio = r"\d+\.\d\d \(\d+\.\d\d-\d+\.\d\d\)"
    assert re.search(rf"{row}\| {rate} \| {rate} \| {ratio} \|", table), table


def test_quick_tracking_cost_benchmark_writes_its_table(tmp_path):
    result = run(
        [PYTHON, "benchmarks/tracking_cost.py", "--quick", "--out", str(tmp_path)],
        REPO,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    table = (tmp_path / "tracking_cost.md").read_text()
    assert "Command: `python benchmarks/tracking_cost.py --quick --out " in table
    number = r"\d+\.\d\d \(\d+\.\d\d-\d+\.\d\d\)"
    for task in TASKS:
        # The untracked fit's seconds, the six ratios, and the milliseconds one epoch's send takes.
        row = rf"\| {re.escape(task)} \| [^|]+; \d+ epochs \|" + rf" {number} \|" * 7
        assert re.search(row + r" \d+\.\d \|", table), task
    assert re.search(r"Alembic \d+\.\d\d s; .* a new one .* \d+\.\d\d s, an existing one", table)


def test_quick_sweep_overhead_benchmark_writes_its_table(tmp_path):
    command = ["benchmarks/sweep_overhead.py", "--quick", "--tasks", "classification"]
    result = run([PYTHON, *command, "--out", str(tmp_path)], REPO, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    table = (tmp_path / "sweep_overhead.md").read_text()
    assert "Command: `python benchmarks/sweep_overhead.py --quick --tasks classification" in table
    number = r"\d+\.\d\d \(\d+\.\d\d-\d+\.\d\d\)"
    row = r"\| classification \| [^|]+ \| 2 \|" + rf" {number} \|" * 4 + r" \d+\.\d\d \|"
    assert re.search(row, table), table
    assert re.search(r"importing Optuna \d+\.\d\d s; making a new SQLite study \d+\.\d\d s", table)


def test_forked_runs_benchmark_times_both_ways_on_one_render(tmp_path):
    result = run(
        [PYTHON, "benchmarks/forked_runs.py", "--renders", "1", "--out", str(tmp_path / "t.md")],
        REPO,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    table = (tmp_path / "t.md").read_text()
    for name in ("import check", "3-epoch run"):
        assert re.search(rf"\| {name} \| \d+\.\d\d \| \d+\.\d\d \| \d\.\d\d \|", table), table
