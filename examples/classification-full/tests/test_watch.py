"""Watching a run: the progress bar, TensorBoard, the curves and the final line."""

import csv
import math
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import conftest
import task_cases
from classification_full import (
    console,
    engine,
    plot,
    run_files,
    train,
)
from classification_full.checkpoint import load_checkpoint
from classification_full.config import load_config
from classification_full.data import load_data
from classification_full.model import build_model
from classification_full.task import METRICS

SMALL = ["--device", "cpu", *conftest.SMALL_FLAGS]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# Probes, all (`pytest -m probe`): progress bars, TensorBoard, the curves, the last line.
pytestmark = pytest.mark.probe


def small_config(out: Path, *settings: str):
    return load_config(None, [*task_cases.SMALL, "device=cpu", f"out={out}", *settings])


def read_rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def png_size(path: Path) -> tuple[int, int]:
    """Width and height in pixels, from the PNG header."""
    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC), f"{path} is not a PNG"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


# The progress bar


def test_no_bar_when_the_output_is_not_a_terminal(tmp_path, capsys):
    assert train.main([*SMALL, "--epochs", "2", "--out", str(tmp_path / "run")]) == 0
    assert capsys.readouterr().err == ""


def test_a_terminal_shows_a_bar_per_epoch_unless_no_progress(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # drawn into the captured stderr
    assert train.main([*SMALL, "--epochs", "2", "--out", str(tmp_path / "on")]) == 0
    captured = capsys.readouterr()
    assert "epoch 1/2:" in captured.err and "epoch 2/2:" in captured.err, captured.err
    assert "epoch 1/2:" not in captured.out  # the bar stays off stdout, where the lines go

    out = tmp_path / "off"
    assert train.main([*SMALL, "--epochs", "2", "--out", str(out), "--no-progress"]) == 0
    assert capsys.readouterr().err == ""
    assert load_config(None, ["progress=false"]).progress is False


def epoch_settings() -> dict:
    """The keyword arguments train_one_epoch takes besides the model, batches, optimizer, task."""
    settings = {}
    settings["scaler"] = torch.amp.GradScaler("cpu", enabled=False)
    settings["amp_dtype"] = torch.bfloat16
    settings["max_grad_norm"] = 1.0
    return settings


class RecordingBar:
    """Stands in for tqdm: counts the steps and keeps what it was asked to show."""

    def __init__(self) -> None:
        self.steps, self.shown = 0, []

    def update(self, n: int = 1) -> None:
        self.steps += n

    def set_postfix_str(self, text: str, refresh: bool = True) -> None:
        self.shown.append((self.steps, text))


def count_reads(monkeypatch) -> list[str]:
    """Every read of a tensor's value into Python (each one waits for the device), by name."""
    reads = []
    for name in ("item", "tolist", "__float__", "__int__", "__bool__"):
        real = getattr(torch.Tensor, name)

        def counted(self, *args, real=real, name=name):
            reads.append(name)
            return real(self, *args)

        monkeypatch.setattr(torch.Tensor, name, counted)
    return reads


def test_the_bar_reads_the_loss_only_every_check_every_steps(tmp_path, monkeypatch):
    monkeypatch.setattr(engine, "CHECK_EVERY", 4)
    cfg = small_config(tmp_path / "run")
    data = load_data(cfg)
    inputs, targets = next(iter(train.Batches(data.train, 8, shuffle=False)))
    steps = 10

    def epoch(bar) -> list[str]:
        model = build_model(cfg, data.input_shape, data.task.output_dim)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        batches = [(inputs, targets)] * steps
        with monkeypatch.context() as patch:
            reads = count_reads(patch)
            engine.train_one_epoch(
                model, batches, optimizer, data.task, **epoch_settings(), bar=bar
            )
        return reads

    bar = RecordingBar()
    without_bar, with_bar = epoch(None), epoch(bar)
    assert bar.steps == steps  # the step count moves every step, reading nothing
    assert [step for step, _ in bar.shown] == [4, 8]  # the loss, every CHECK_EVERY steps
    assert all(re.fullmatch(r"loss \d+\.\d{4}", text) for _, text in bar.shown), bar.shown
    # One read of the device per loss shown, and none per step.
    assert len(with_bar) - len(without_bar) == steps // 4, (with_bar, without_bar)


# TensorBoard


def tensorboard_modules() -> list[str]:
    return [name for name in sys.modules if "tensorboard" in name.split(".")]


def test_tensorboard_off_imports_nothing_from_it(tmp_path, monkeypatch):
    for name in tensorboard_modules():  # imported by another test in this process
        monkeypatch.delitem(sys.modules, name)
    result = train.fit(small_config(tmp_path / "run", "epochs=1"))
    assert result["history"]
    assert tensorboard_modules() == []
    assert not (tmp_path / "run" / "tensorboard").exists()


def scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder))
    events.Reload()
    return {
        tag: [(event.step, event.value) for event in events.Scalars(tag)]
        for tag in events.Tags()["scalars"]
    }


def test_tensorboard_on_writes_each_epoch_row_as_scalars(tmp_path):
    out = tmp_path / "run"
    result = train.fit(small_config(out, "epochs=2", "tensorboard=true"))
    logged = scalars(out / "tensorboard")
    expected = {"loss/train": "train_loss", "loss/val": "val_loss", "lr": "lr"}
    expected.update({f"val/{name}": f"val_{name}" for name in METRICS})
    assert set(logged) == set(expected)  # no skipped-steps fraction without a GradScaler
    for tag, column in expected.items():
        rows = [(row["epoch"], row[column]) for row in result["history"]]
        assert [step for step, _ in logged[tag]] == [1, 2], tag
        for (_, value), (_, wanted) in zip(logged[tag], rows, strict=True):
            assert math.isclose(value, wanted, rel_tol=1e-6), (tag, value, wanted)


def test_fp16_logs_the_fraction_of_steps_the_grad_scaler_skipped(tmp_path):
    out = tmp_path / "run"
    train.fit(small_config(out, "epochs=2", "tensorboard=true", "amp_dtype=float16"))
    logged = scalars(out / "tensorboard")["amp/skipped_fraction"]
    assert [step for step, _ in logged] == [1, 2]
    assert all(0.0 <= value <= 1.0 for _, value in logged), logged


def test_a_resumed_run_hides_the_events_logged_after_its_checkpoint(tmp_path, monkeypatch):
    out = tmp_path / "run"
    cfg = small_config(out, "epochs=3", "tensorboard=true", "checkpoint_every_s=0")
    save = run_files.save_checkpoint

    def stop_before_epoch_2_is_saved(state, path):
        if state["epoch"] == 2:  # epoch 2 is logged already, but never saved
            raise KeyboardInterrupt
        save(state, path)

    monkeypatch.setattr(run_files, "save_checkpoint", stop_before_epoch_2_is_saved)
    with pytest.raises(KeyboardInterrupt):
        train.fit(cfg)
    monkeypatch.undo()
    assert [step for step, _ in scalars(out / "tensorboard")["loss/val"]] == [1, 2]
    train.fit(cfg, load_checkpoint(out / "last.pt"), out / "last.pt")
    # Epoch 2 trained twice, shown once: the resumed run's.
    assert [step for step, _ in scalars(out / "tensorboard")["loss/val"]] == [1, 2, 3]


def test_tensorboard_on_without_the_package_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    out = tmp_path / "run"
    code = train.main([*SMALL, "--out", str(out), "--set", "tensorboard=true"])
    captured = capsys.readouterr()
    assert code == train.EXIT_INPUT and captured.out == ""
    assert captured.err.splitlines() == [
        'error: tensorboard = true needs the tensorboard package: pip install -e ".[tensorboard]" '
        "(or set tensorboard=false)"
    ]
    assert not out.exists()


# The curves


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> list[Path]:
    folder = tmp_path_factory.mktemp("runs")
    runs = [folder / "slow", folder / "fast"]
    train.fit(small_config(runs[0], "epochs=3", "lr=1e-3"))
    train.fit(small_config(runs[1], "epochs=2", "lr=1e-2"))
    return runs


def test_plot_draws_one_run_and_two_runs_into_a_png(two_runs, tmp_path, capsys):
    one, two = tmp_path / "one.png", tmp_path / "two.png"
    assert plot.main([str(two_runs[0]), "--out", str(one)]) == 0
    assert plot.main([*map(str, two_runs), "--out", str(two)]) == 0
    assert capsys.readouterr().out.splitlines() == [f"wrote {one}", f"wrote {two}"]
    for path in (one, two):
        width, height = png_size(path)
        assert 800 <= width <= 3000 and 300 <= height <= 2000, (path.name, width, height)
        assert 10_000 < path.stat().st_size < 1_000_000, path.name
    assert one.read_bytes() != two.read_bytes()


def test_plot_refuses_a_folder_without_metrics_in_one_line(tmp_path, capsys):
    assert plot.main([str(tmp_path), "--out", str(tmp_path / "x.png")]) == plot.EXIT_INPUT
    assert capsys.readouterr().err.splitlines() == [
        f"error: {tmp_path} has no metrics.csv; give a folder a training run wrote"
    ]
    assert not (tmp_path / "x.png").exists()


@pytest.mark.parametrize(
    "target, overwrite",
    [
        ("metrics.csv", False),  # the run's own metrics, which a PNG would replace
        ("metrics.csv", True),
        ("last.pt", False),
        ("curves.png", False),
        ("mine.png", False),
    ],
)
def test_plot_never_replaces_a_file_without_overwrite_nor_its_input(
    two_runs, tmp_path, capsys, target, overwrite
):
    run = tmp_path / "run"
    shutil.copytree(two_runs[0], run)
    (run / "mine.png").write_bytes(b"the user's picture")
    assert plot.main([str(run), "--out", str(run / "curves.png")]) == 0  # absent: drawn
    capsys.readouterr()
    kept = {path.name: path.read_bytes() for path in run.iterdir()}
    out = run / target
    argv = [str(run), "--out", str(out)] + (["--overwrite"] if overwrite else [])
    assert plot.main(argv) == plot.EXIT_INPUT
    captured = capsys.readouterr()
    if overwrite:
        message = f"error: --out {out} is the input {run / 'metrics.csv'}; choose another --out"
    else:
        message = f"error: --out {out} exists; choose another file or add --overwrite"
    assert (captured.out, captured.err.splitlines()) == ("", [message])
    assert {path.name: path.read_bytes() for path in run.iterdir()} == kept
    # With consent a PNG that is no input is replaced, whole.
    assert plot.main([str(run), "--out", str(run / "mine.png"), "--overwrite"]) == 0
    assert (run / "mine.png").read_bytes()[:8] == PNG_MAGIC


@pytest.mark.parametrize("column", ["epoch", "train_loss", "val_loss", "lr"])
def test_plot_names_a_missing_column_in_one_line(two_runs, tmp_path, capsys, column):
    metrics = (two_runs[0] / "metrics.csv").read_text().splitlines()
    header = metrics[0].split(",")
    keep = [i for i, name in enumerate(header) if name != column]
    run = tmp_path / "edited"
    run.mkdir()
    rows = [",".join(line.split(",")[i] for i in keep) for line in metrics]
    (run / "metrics.csv").write_text("\n".join(rows) + "\n")
    out = tmp_path / "x.png"
    assert plot.main([str(run), "--out", str(out)]) == plot.EXIT_INPUT
    path = run / "metrics.csv"
    if column == "epoch":
        message = f"error: {path} holds no epochs; give a folder a training run wrote"
    else:
        message = f"error: {path} has no {column} column; give a folder a training run wrote"
    assert capsys.readouterr().err.splitlines() == [message]
    assert not out.exists()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs a FIFO")
def test_plot_refuses_a_fifo_as_metrics_instead_of_waiting_on_it(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    os.mkfifo(run / "metrics.csv")
    command = [sys.executable, "-m", plot.__name__, str(run), "--out", str(tmp_path / "x.png")]
    done = subprocess.run(command, env=cli_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == plot.EXIT_INPUT
    assert done.stderr.splitlines() == [
        f"error: {run / 'metrics.csv'} is not a regular file; give a folder a training run wrote"
    ]
    assert not (tmp_path / "x.png").exists()


@pytest.mark.skipif(sys.platform == "win32", reason="needs SIGINT")
def test_ctrl_c_in_plot_is_one_line_exit_130_and_writes_nothing(tmp_path):
    # The drawing is replaced by a wait, so that Ctrl-C lands while the command works.
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.csv").write_text("epoch,lr,train_loss,val_loss\n1,0.1,1.0,1.0\n")
    code = (
        "import sys, time\n"
        f"from {plot.__package__} import plot\n"
        "def slow(runs):\n"
        "    print('drawing', flush=True); time.sleep(60)\n"
        "plot.render_curves = slow\n"
        "sys.exit(plot.main(sys.argv[1:]))\n"
    )
    out = tmp_path / "x.png"
    process = subprocess.Popen(
        [sys.executable, "-c", code, str(run), "--out", str(out)],
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout.readline() == "drawing\n"
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == plot.EXIT_INTERRUPTED == 130
    assert (stdout, stderr.splitlines()) == ("", ["interrupted; nothing was written"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def cli_env() -> dict:
    src = str(Path(__file__).resolve().parents[1] / "src")
    path = os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path}


def test_without_matplotlib_plot_says_which_extra_and_training_skips_the_curves(
    two_runs, tmp_path, capsys, monkeypatch
):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert plot.main([str(two_runs[0]), "--out", str(tmp_path / "x.png")]) == 2
    assert capsys.readouterr().err.splitlines() == [
        'error: plotting needs matplotlib: pip install -e ".[plot]"'
    ]
    out = tmp_path / "run"
    assert train.main([*SMALL, "--epochs", "1", "--out", str(out)]) == 0
    assert (out / "metrics.csv").exists() and not (out / "curves.png").exists()


# The final line


def test_the_last_line_names_the_best_epoch_its_metrics_and_the_time(tmp_path, capsys):
    out = tmp_path / "run"
    assert train.main([*SMALL, "--epochs", "3", "--out", str(out)]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    rows = read_rows(out / "metrics.csv")
    best = min(rows, key=lambda row: float(row["val_loss"]))
    metrics = ", ".join(f"val_{name} {float(best[f'val_{name}']):.4f}" for name in METRICS)
    pattern = (
        f"best val_loss {float(best['val_loss']):.4f} at epoch {best['epoch']} of 3 "
        f"\\({re.escape(metrics)}\\); (\\d+\\.\\d) s; metrics and checkpoints in "
        + re.escape(str(out))
    )
    assert re.fullmatch(pattern, last), last
    assert png_size(out / "curves.png")[0] >= 800  # the curves, drawn at the end of the run


@pytest.mark.parametrize(
    "seconds, text",
    [(0.04, "0.0 s"), (12.34, "12.3 s"), (59.96, "1 min 00 s"), (754, "12 min 34 s"),
     (7530, "2 h 05 min")],
)  # fmt: skip
def test_durations_read_as_a_person_would_write_them(seconds, text):
    assert console.human_duration(seconds) == text
