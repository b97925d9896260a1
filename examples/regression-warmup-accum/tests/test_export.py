"""Export: the model as ONNX and as a torch.export program, checked on the task's own data.

A model trained briefly on a file of the task's data is exported with the export command.
onnxruntime, and the program torch.export.load reads back, then run it on that file's samples,
prepared by predict's own reading and batching code, in batches of several sizes (each dynamic
dimension in several sizes, and in its largest); their outputs must match the PyTorch model's.
The JSON beside the model must hold what predict applies: a serving system that follows it
alone gets the inputs predict gives the model (task_cases.check_serving). Each refusal is one
line and exit 2.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import onnxruntime
import pytest
import torch

import task_cases
from regression_warmup_accum import export, predict
from regression_warmup_accum.config import load_config
from regression_warmup_accum.data import Batches
from regression_warmup_accum.train import fit

# Each export traces the model and translates it (seconds): these are probes (pytest -m probe).
pytestmark = pytest.mark.probe

# How far the exported models' float32 outputs may be from PyTorch's on the same inputs. ONNX
# Runtime's kernels sum in other orders: measured at most 1.9e-6 (outputs up to 9.3) over the
# four tasks' default models on 60-300 samples in batches of 1, 7 and 64; the reloaded
# torch.export program ran the same kernels as the model (0.0).
ATOL = 1e-5
RTOL = 1e-5
# Batch sizes the exported models run: one sample, an odd size, and many.
BATCH_SIZES = (1, 7, 64)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A 2-epoch run on the CPU: the data file and best.pt."""
    folder = tmp_path_factory.mktemp("export")
    data = task_cases.write_export_data(folder)
    settings = [*task_cases.EXPORT_SETTINGS, f"data={data}", "seed=0", "epochs=2"]
    fit(load_config(None, [*settings, f"out={folder / 'run'}", "device=cpu", "progress=false"]))
    return data, folder / "run" / "best.pt"


def run_cli(*args, cwd):
    """`python -m <package>.export ARGS` in a new process, as a user runs it."""
    command = [sys.executable, "-m", export.__name__, *map(str, args)]
    env = {**os.environ, "PYTHONPATH": str(Path(export.__file__).parents[1])}
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def exported(run, tmp_path_factory):
    """The run's best.pt exported in both formats: ONNX by the command, as a user runs it,
    and torch.export in this process."""
    _, checkpoint = run
    folder = tmp_path_factory.mktemp("exported")
    result = run_cli("--checkpoint", checkpoint, "--format", "onnx", "--out", "m.onnx", cwd=folder)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("onnx model in m.onnx (input "), result.stdout
    assert not result.stderr  # the exporter's own chatter is kept out of the terminal
    argv = ["--checkpoint", str(checkpoint), "--format", "torch-export"]
    assert export.main([*argv, "--out", str(folder / "m.pt2")]) == 0
    return folder / "m.onnx", folder / "m.pt2"


def prepared(predictor, data: str, batch_size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The file's samples as predict reads them, in batches of batch_size as predict batches
    them: (the model's inputs, the samples' positions in the file)."""
    _, split = predictor.inputs.read(data, predictor.task, labelled=False)
    return list(Batches(split, batch_size, shuffle=False, device="cpu"))


def tiled(predictor, data: str, axis: int, length: int) -> torch.Tensor:
    """Real inputs whose dimension `axis` has exactly `length` positions: of the file's batches of
    3, the one longest along `axis` (a short document can make a batch 1 token long), repeated
    along it as often as needed and cut to `length`."""
    inputs = max((batch for batch, _ in prepared(predictor, data, 3)), key=lambda b: b.shape[axis])
    repeats = [1] * inputs.dim()
    repeats[axis] = -(-length // inputs.shape[axis])
    return inputs.repeat(*repeats).narrow(axis, 0, length)


def compare(run_exported, predictor, data: str, spec: dict) -> None:
    """run_exported (inputs -> outputs) against the PyTorch model on every sample of the file,
    in each batch size, and against predict's own outputs for the file; then each dynamic
    dimension besides the batch's cut to 1-3 positions, and at the largest size of each
    dimension that has one (the documents' max_length)."""
    _, split = predictor.inputs.read(data, predictor.task, labelled=False)
    expected = predictor.outputs(split)  # predict's path: its batches, inference mode
    sizes = [set() for _ in spec["shape"]]
    for batch_size in BATCH_SIZES:
        outputs = torch.empty_like(expected)
        for inputs, positions in prepared(predictor, data, batch_size):
            for axis, size in enumerate(inputs.shape):
                sizes[axis].add(size)
            got = run_exported(inputs)
            with torch.inference_mode():
                reference = predictor.model(inputs).float()
            assert got.shape == reference.shape
            torch.testing.assert_close(got, reference, atol=ATOL, rtol=RTOL)
            outputs[positions] = got
        torch.testing.assert_close(outputs, expected, atol=ATOL, rtol=RTOL)
    for axis, size in enumerate(spec["shape"]):
        if isinstance(size, str) and axis > 0:  # a dynamic dimension besides the batch's:
            # also cut to its first 1, 2 and 3 positions (padded batches may all share a
            # few lengths, e.g. powers of two)
            for length in (1, 2, 3):
                cut = tiled(predictor, data, axis, length)
                sizes[axis].add(length)
                with torch.inference_mode():
                    reference = predictor.model(cut).float()
                torch.testing.assert_close(run_exported(cut), reference, atol=ATOL, rtol=RTOL)
        if isinstance(size, str):  # a dynamic dimension ran in several sizes
            assert len(sizes[axis]) >= 3, (size, sizes[axis])
        if size in spec.get("max", {}):  # and in its largest: real inputs repeated to it
            inputs = tiled(predictor, data, axis, spec["max"][size])
            with torch.inference_mode():
                reference = predictor.model(inputs).float()
            torch.testing.assert_close(run_exported(inputs), reference, atol=ATOL, rtol=RTOL)


def test_onnx_model_matches_pytorch_in_onnxruntime(run, exported):
    data, checkpoint = run
    predictor = predict.load_predictor(checkpoint, device="cpu")
    session = onnxruntime.InferenceSession(exported[0], providers=["CPUExecutionProvider"])
    (given,) = session.get_inputs()
    spec = json.loads(Path(f"{exported[0]}.json").read_text())["input"]
    assert given.name == spec["name"]
    assert given.shape == spec["shape"]  # a str: a dimension of any size

    def run_onnx(inputs: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(session.run(None, {given.name: inputs.numpy()})[0])

    compare(run_onnx, predictor, data, spec)


def test_torch_export_program_reloads_and_matches_pytorch(run, exported):
    data, checkpoint = run
    predictor = predict.load_predictor(checkpoint, device="cpu")
    program = torch.export.load(exported[1]).module()

    def run_program(inputs: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            return program(inputs).float()

    spec = json.loads(Path(f"{exported[1]}.json").read_text())["input"]
    compare(run_program, predictor, data, spec)


def test_json_beside_the_model_holds_what_predict_applies(run, exported):
    data, checkpoint = run
    predictor = predict.load_predictor(checkpoint, device="cpu")
    for path, fmt in zip(exported, ("onnx", "torch-export"), strict=True):
        description = json.loads(Path(f"{path}.json").read_text(encoding="utf-8"))
        assert description["format"] == fmt
        assert description["checkpoint"]["path"] == str(checkpoint)
        assert description["input"]["shape"][0] == "batch"
        assert description["output"] == predictor.task.serving()
        assert description["output"]["shape"] == ["batch", predictor.task.output_dim]
        # The task's own check: its values are predict's, and a serving system that follows
        # the JSON alone prepares the file as predict does.
        task_cases.check_serving(description, predictor, data)


def refused(capsys, argv: list[str]) -> str:
    """Run the command in this process: exit 2 and one line on stderr, which is returned."""
    assert export.main(argv) == 2
    captured = capsys.readouterr()
    assert not captured.out
    assert captured.err.startswith("error: ") and captured.err.count("\n") == 1, captured.err
    return captured.err


def test_missing_and_damaged_checkpoints_are_refused(tmp_path, capsys):
    out = str(tmp_path / "m.onnx")
    err = refused(capsys, ["--checkpoint", str(tmp_path / "none.pt"), "--out", out])
    assert "none.pt does not exist" in err
    damaged = tmp_path / "damaged.pt"
    damaged.write_bytes(b"PK\x03\x04" + b"\x00" * 20)
    err = refused(capsys, ["--checkpoint", str(damaged), "--out", out])
    assert "is truncated or damaged" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["damaged.pt"]  # nothing written


def test_an_existing_out_or_json_is_never_replaced_without_overwrite(run, tmp_path, capsys):
    _, checkpoint = run
    out = tmp_path / "m.onnx"
    out.write_text("mine")
    err = refused(capsys, ["--checkpoint", str(checkpoint), "--out", str(out)])
    assert err == f"error: --out {out} exists; choose another file or add --overwrite\n"
    beside = tmp_path / "n.pt2.json"
    beside.write_text("mine too")
    argv = ["--checkpoint", str(checkpoint), "--format", "torch-export"]
    err = refused(capsys, [*argv, "--out", str(tmp_path / "n.pt2")])
    assert "n.pt2.json (written beside --out) exists; choose another --out or add" in err
    err = refused(capsys, [*argv, "--out", str(tmp_path)])
    assert "is a folder; give a file name such as model.pt2" in err
    assert out.read_text() == "mine" and beside.read_text() == "mine too"
    assert not (tmp_path / "n.pt2").exists()


def test_overwrite_replaces_the_model_and_its_json(run, tmp_path, capsys):
    _, checkpoint = run
    out = tmp_path / "m.pt2"
    for path in (out, tmp_path / "m.pt2.json"):
        path.write_text("old")
    argv = ["--checkpoint", str(checkpoint), "--format", "torch-export", "--out", str(out)]
    assert export.main([*argv, "--overwrite"]) == 0
    assert capsys.readouterr().out.startswith(f"torch-export model in {out} (input ")
    assert json.loads((tmp_path / "m.pt2.json").read_text())["format"] == "torch-export"
    assert torch.export.load(out).module() is not None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.pt2", "m.pt2.json"]  # no leftovers


def test_an_unknown_format_is_refused(run, tmp_path, capsys):
    _, checkpoint = run
    argv = ["--checkpoint", str(checkpoint), "--format", "torchscript"]
    err = refused(capsys, [*argv, "--out", str(tmp_path / "m")])
    assert "--format torchscript is not one of onnx, torch-export" in err


class DataDependent(torch.nn.Module):
    """The model, then a branch on the values of its outputs: torch.export cannot trace it."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        outputs = self.model(inputs)
        if outputs.sum() > 0:
            return outputs
        return -outputs


class Unexportable(predict.Predictor):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.model = DataDependent(self.model)


@pytest.mark.parametrize(
    ("fmt", "what"), [("onnx", "to ONNX"), ("torch-export", "with torch.export")]
)
def test_the_exporters_failure_says_what_and_why(run, tmp_path, capsys, monkeypatch, fmt, what):
    _, checkpoint = run
    monkeypatch.setattr(export, "Predictor", Unexportable)
    out = tmp_path / "m.out"
    err = refused(capsys, ["--checkpoint", str(checkpoint), "--format", fmt, "--out", str(out)])
    assert err.startswith(f"error: cannot export the model {what}: ")
    assert "data-dependent" in err and "if outputs.sum() > 0:" in err, err
    assert list(tmp_path.iterdir()) == []  # neither a model nor its JSON


def test_a_missing_extra_is_named(run, tmp_path, capsys, monkeypatch):
    _, checkpoint = run
    monkeypatch.setitem(sys.modules, "onnxscript", None)  # as if it were not installed
    err = refused(capsys, ["--checkpoint", str(checkpoint), "--out", str(tmp_path / "m.onnx")])
    assert "needs the package onnxscript" in err and 'pip install -e ".[export]"' in err
    assert list(tmp_path.iterdir()) == []
