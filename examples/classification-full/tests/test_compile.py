"""torch.compile (K1, K2, C4 in the README): compiled runs checked against eager ones.

Compiling takes seconds to a minute per model on the CPU, so every test here is a probe
(`python -m pytest -m probe`); the other tests train eager (conftest.py). The compiled and
eager runs below are made once and shared by the tests of this file.
"""

import dataclasses
import math
import os
import subprocess
import sys

import pytest
import torch
from torch._dynamo.utils import counters

import conftest
from classification_full import compiling, train
from classification_full.checkpoint import load_checkpoint
from classification_full.data import load_data
from classification_full.model import build_model
from classification_full.predict import load_predictor

pytestmark = pytest.mark.probe

# K1: how far a compiled run may end from the eager run of the same seed. Compiled kernels add
# in another order (fused, vectorised), so the two part at float rounding (~1e-7 relative) and
# can drift apart a little over the steps. Measured on the four tasks' small 2-epoch runs (CPU,
# torch 2.13): tabular and text within 3e-8 relative (losses) and 2e-7 (weights), the image
# CNN (BatchNorm) 4e-6 and 2.4e-4. A bug that trains or validates other weights, or draws
# other dropout masks, is off by 1e-3 or more.
# Under AMP (bf16 autocast on the CPU) the two round to bf16 at other points: a regression
# run compiled for epoch 1 and resumed eager ended 1.1e-4 relative (losses) and 7.6e-4
# (weights) from the eager run (3 seeds measured).
LOSS_RTOL = 5e-4
WEIGHT_ATOL = 5e-3


def run(cfg, out, **settings) -> dict:
    """A run of cfg with `settings`, its compiled graphs counted (K2)."""
    torch._dynamo.reset()  # every run compiles its own model afresh
    counters.clear()
    result = train.fit(dataclasses.replace(cfg, out=str(out), **settings))
    result["graphs"] = counters["stats"]["unique_graphs"]
    return result


@pytest.fixture(scope="module")
def base():
    return conftest.small_config(epochs=2, device="cpu", checkpoint_every_s=0.0)


@pytest.fixture(scope="module")
def runs(base, tmp_path_factory):
    """The same 2 epochs, eager and compiled."""
    root = tmp_path_factory.mktemp("compile")
    return {
        "eager": run(base, root / "eager", compile=False),
        "compiled": run(base, root / "compiled", compile=True),
        "root": root,
    }


def assert_same_training(ours: dict, eager: dict, what: str) -> None:
    for row, expected in zip(ours["history"], eager["history"], strict=True):
        for key in ("lr", "train_loss", "val_loss"):
            assert math.isclose(row[key], expected[key], rel_tol=LOSS_RTOL, abs_tol=1e-7), (
                f"K1: {what}: epoch {row['epoch']}'s {key} is {row[key]}, the eager run's "
                f"{expected[key]} (tolerance {LOSS_RTOL} relative)"
            )
    theirs = eager["model"].state_dict()
    for name, tensor in ours["model"].state_dict().items():
        if not tensor.is_floating_point():
            continue
        gap = (tensor - theirs[name]).abs().max().item()
        assert gap <= WEIGHT_ATOL, (
            f"K1: {what}: weights {name} end {gap:.2e} from the eager run's (tolerance "
            f"{WEIGHT_ATOL})"
        )


def test_K1_a_compiled_run_trains_and_validates_as_the_eager_run(runs):
    # The same seed: the same batches, dropout masks and initial weights; only the kernels
    # differ. Validation's losses compare the weights each epoch ended with (and validated).
    assert runs["compiled"]["graphs"] > 0, "K1: compile=true trained without compiling"
    assert runs["eager"]["graphs"] == 0, "K1: compile=false compiled"
    assert_same_training(runs["compiled"], runs["eager"], "compiled run")


def batch_shapes(cfg, epochs: int) -> set:
    """The input shapes past the batch dimension that `epochs` epochs of training and one of
    validation give the model, drawn as train.py draws them (nothing trains)."""
    data = load_data(cfg)
    batches = train.Batches(data.train, cfg.batch_size, shuffle=True, seed=cfg.seed)
    shapes = set()
    for _ in range(epochs):
        shapes |= {tuple(inputs.shape[1:]) for inputs, _ in batches}
    val = train.Batches(data.val, cfg.val_batch_size or 4 * cfg.batch_size, shuffle=False)
    return shapes | {tuple(inputs.shape[1:]) for inputs, _ in val}


def test_K2_the_batches_have_few_shapes_to_compile_for(base):
    # Each shape past the batch dimension costs a graph in training and one in validation (a
    # smaller batch one more each, after which the batch dimension is symbolic). Torch stops
    # compiling a model after compiling.RECOMPILE_LIMIT graphs (compiling.py raises then; by
    # default torch runs it eager from then on): the project's data must stay well inside it.
    cfg = dataclasses.replace(base, n_samples=2048)  # the default data size, 10 epochs
    shapes = batch_shapes(cfg, epochs=10)
    assert 2 * len(shapes) + 2 <= compiling.RECOMPILE_LIMIT, (
        f"K2: the batches have {len(shapes)} shapes ({sorted(shapes)[:6]}...), each a graph to "
        f"compile in training and in validation, past the limit of {compiling.RECOMPILE_LIMIT}"
    )


def test_K2_a_compiled_run_compiles_a_few_graphs_not_one_per_batch(runs, base):
    shapes = batch_shapes(base, epochs=base.epochs)
    graphs = runs["compiled"]["graphs"]
    assert graphs <= 2 * len(shapes) + 2, (
        f"K2: {graphs} graphs compiled for {len(shapes)} input shapes: a recompile storm "
        "(the smaller last batch or each new length compiling anew)"
    )


def test_C4_checkpoints_hold_the_plain_model_state(runs, base):
    plain = build_model(base, *shape_and_outputs(base)).state_dict()
    for name in ("last.pt", "best.pt"):
        checkpoint = load_checkpoint(runs["root"] / "compiled" / name)
        states = {"model": checkpoint["model"]}
        for what, state in states.items():
            compiled_keys = [key for key in state if "_orig_mod." in key]
            assert not compiled_keys, (
                f"C4: {name}'s {what} holds the compiled module's state ({compiled_keys[0]}): "
                "save the model's own"
            )
            assert list(state) == list(plain), f"C4: {name}'s {what} keys differ from the model's"
            model = build_model(base, *shape_and_outputs(base))
            model.load_state_dict(state)  # strict: every key of a plain model, and only those


def shape_and_outputs(cfg) -> tuple:
    data = load_data(cfg)
    return data.input_shape, data.task.output_dim


def test_C4_predict_loads_a_compiled_run_as_a_plain_model(runs):
    # predict builds the plain model: what a compiled run saved loads into it as it is.
    predictor = load_predictor(runs["root"] / "compiled" / "best.pt", device="cpu")
    assert not isinstance(predictor.model, torch._dynamo.eval_frame.OptimizedModule)


@pytest.mark.parametrize("first, then", [(False, True), (True, False)])
def test_C4_a_run_resumes_compiled_from_eager_and_eager_from_compiled(runs, base, first, then):
    # A run stopped after epoch 1 and resumed with the other compile setting ends where the
    # unbroken eager run ends, up to K1's tolerance: the checkpoint is the same either way.
    out = runs["root"] / f"resume-{first}-{then}"
    run(base, out, epochs=1, compile=first)
    last = out / "last.pt"
    torch._dynamo.reset()
    counters.clear()
    resumed = train.fit(
        dataclasses.replace(base, out=str(out), compile=then), load_checkpoint(last), last
    )
    what = f"{'compiled' if first else 'eager'} epoch 1, resumed {'compiled' if then else 'eager'}"
    assert_same_training(resumed, runs["eager"], f"C4: {what}")


def test_without_a_cpp_compiler_the_run_stops_in_one_line(tmp_path):
    # Inductor builds C++ on the CPU; CXX names the compiler it looks for, here none.
    env = {**os.environ, "PYTHONPATH": "src", "CXX": str(tmp_path / "no-such-compiler")}
    out = tmp_path / "run"
    command = [sys.executable, "-m", f"{train.__package__}.train", "--device", "cpu"]
    command += ["--out", str(out), *conftest.SMALL_FLAGS, "--set", "compile=true"]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == train.EXIT_INPUT, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "C++ compiler" in lines[0] and "compile=false" in lines[0], lines
    assert not out.exists()  # refused before --out was made
