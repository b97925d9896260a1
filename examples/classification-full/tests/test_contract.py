"""Contract tests: watch a small real run and check the loop rules by what the loop does.

Each failure message starts with the rule it breaks (R1-R13; see the project README).
Nothing here reads the source: rewrite the loop as you like, these tests judge behaviour.
"""

import math

import pytest
import torch

import loop_recorder
from classification_full import data as data_module
from classification_full import train
from classification_full.config import Config
from classification_full.engine import evaluate, train_one_epoch
from classification_full.model import build_model

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# The optimizer's update is scaler.step(); fp16 turns the GradScaler on, bf16 leaves it off.
UPDATE = "scaler_step"
AMP_DTYPES = ["float16", "bfloat16"]


def small_config(tmp_path, **changes) -> Config:
    # 330 samples: 264 to train on (4 batches of 64 and one of 8) and 66 to validate (64 + 2).
    settings = {"n_samples": 330, "epochs": 3, "device": DEVICE, "out": str(tmp_path / "run")}
    return Config(**{**settings, **changes})


@pytest.fixture(scope="module", params=AMP_DTYPES)
def run(request, tmp_path_factory):
    """One short recorded run of train.fit, with each autocast dtype."""
    cfg = small_config(tmp_path_factory.mktemp("contract"), amp_dtype=request.param)
    recorder = loop_recorder.LoopRecorder()
    result, error = None, None
    try:
        with recorder.watch(train, data_module):
            result = train.fit(cfg)
    except Exception as err:  # the checks still read what was recorded before the failure
        error = err
    return cfg, recorder, result, error


def test_run_completes(run):
    cfg, recorder, result, error = run
    assert error is None, f"the recorded run failed: {error!r}"
    assert [row["epoch"] for row in result["history"]] == list(range(1, cfg.epochs + 1))


def test_R1_optimizer_updates_the_parameters_the_model_uses(run):
    cfg, recorder, result, error = run
    assert recorder.optimizers, "R1: no optimizer was built"
    optimizer = recorder.optimizers[-1]
    in_model = {id(p) for p in recorder.model.parameters()}
    in_optimizer = {id(p) for group in optimizer.param_groups for p in group["params"]}
    assert in_optimizer == in_model, (
        "R1: the optimizer holds parameters the model no longer uses; "
        "build the optimizer after model.to(device)"
    )


def test_R2_R3_each_step_clears_computes_and_applies_gradients_in_order(run):
    cfg, recorder, result, error = run
    steps = recorder.train_steps()
    assert steps, "R3: no training step was recorded"
    for epoch, batch, events in steps:
        names = [e.name for e in events]
        where = f"(epoch {epoch}, batch {batch}: {', '.join(names)})"
        assert names.count("backward") == 1, (
            f"R3: {names.count('backward')} backward() calls in one step {where}"
        )
        assert names.count(UPDATE) == 1, (
            f"R3: {names.count(UPDATE)} optimizer updates in one step {where}"
        )
        backward, update = names.index("backward"), names.index(UPDATE)
        assert "forward" in names[:backward], f"R3: backward() before the forward pass {where}"
        if "zero_grad" not in names[:backward]:
            where_zero = "after backward()" if "zero_grad" in names else "nowhere"
            pytest.fail(f"R2: gradients cleared {where_zero}, not before backward() {where}")
        assert "zero_grad" not in names[backward:update], (
            f"R2: zero_grad() between backward() and the update {where}"
        )
        assert backward < update, f"R3: optimizer step before backward() {where}"


def test_R4_clipping_comes_after_backward_and_before_the_step(run):
    cfg, recorder, result, error = run
    for epoch, batch, events in recorder.train_steps():
        names = [e.name for e in events]
        where = f"(epoch {epoch}, batch {batch}: {', '.join(names)})"
        assert names.count("clip") == 1, (
            f"R4: clip_grad_norm_ called {names.count('clip')} times in one step {where}"
        )
        clip = names.index("clip")
        assert "backward" in names[:clip], f"R4: gradients clipped before backward() {where}"
        assert UPDATE in names[clip:], f"R4: gradients clipped after optimizer.step() {where}"
        for event in events:
            # Non-finite gradients are fp16 overflow: the scaler skips that update by design.
            if event.name == "step" and math.isfinite(event.info["grad_norm"]):
                limit = cfg.max_grad_norm * (1 + 1e-3)
                assert event.info["grad_norm"] <= limit, (
                    f"R4: the step used a gradient norm of {event.info['grad_norm']:.4g}, "
                    f"above max_grad_norm {cfg.max_grad_norm} {where}"
                )


def test_R5_the_scaler_wraps_backward_and_the_step(run):
    cfg, recorder, result, error = run
    for epoch, batch, events in recorder.train_steps():
        names = [e.name for e in events]
        where = f"(epoch {epoch}, batch {batch}: {', '.join(names)})"
        for event in events:
            if event.name == "backward":
                assert event.info["scaled"], (
                    f"R5: backward() on the loss itself, not on scaler.scale(loss) {where}"
                )
            if event.name == "step":
                assert event.info["in_scaler_step"], (
                    f"R5: optimizer.step() called directly, bypassing scaler.step() {where}"
                )
        assert names.count("update") == 1, (
            f"R5: scaler.update() called {names.count('update')} times in one step {where}"
        )
        assert names.index("update") > names.index(UPDATE), (
            f"R5: scaler.update() before scaler.step() {where}"
        )


def test_R5_gradients_are_unscaled_before_clipping(run):
    cfg, recorder, result, error = run
    for epoch, batch, events in recorder.train_steps():
        names = [e.name for e in events]
        where = f"(epoch {epoch}, batch {batch}: {', '.join(names)})"
        assert "clip" in names, f"R4: no clip_grad_norm_ in this step {where}"
        assert "unscale_" in names[: names.index("clip")], (
            f"R5: gradients clipped before scaler.unscale_() {where}"
        )
        clip = events[names.index("clip")]
        if not math.isfinite(clip.info["norm"]):
            continue  # fp16 overflow in this step: the scaler skips its update by design
        for event in events:
            if event.name == "step":  # the norm the optimizer sees is the clipped true norm
                expected = min(clip.info["norm"], cfg.max_grad_norm)
                assert event.info["grad_norm"] == pytest.approx(expected, rel=1e-2), (
                    f"R5: clipping measured a gradient norm of {clip.info['norm']:.4g}, but "
                    f"the step used {event.info['grad_norm']:.4g}: were they still scaled? {where}"
                )


def test_R6_autocast_covers_the_forward_pass_only_and_the_scaler_only_fp16(run):
    cfg, recorder, result, error = run
    dtype = train.autocast_dtype(cfg.amp_dtype, torch.device(DEVICE))
    for event in recorder.events:
        if event.name == "backward":
            assert not event.info["autocast"], "R6: backward() runs inside autocast"
        if event.name == "forward" and event.phase == "train":
            assert event.info["autocast"], "R6: the training forward pass is not under autocast"
            assert event.info["autocast_dtype"] == dtype, (
                f"R6: autocast with {event.info['autocast_dtype']}, configured {dtype}"
            )
    assert recorder.scalers, "R5: no GradScaler was used"
    for scaler in recorder.scalers:
        assert scaler.is_enabled() == (dtype == torch.float16), (
            f"R6: GradScaler {'on' if scaler.is_enabled() else 'off'} with {dtype}; "
            "fp16 needs loss scaling, bf16 does not"
        )


def test_R8_the_plateau_schedule_steps_after_validation_with_its_loss(run):
    cfg, recorder, result, error = run
    history = result["history"] if result else []
    assert history, "R8: no epoch finished"
    for row in history:
        epoch = row["epoch"]
        steps = recorder.of_epoch(epoch, "scheduler_step")
        assert len(steps) == 1, (
            f"R8: the scheduler stepped {len(steps)} times in epoch {epoch}, not once"
        )
        index, event = steps[0]
        assert event.info["metric"] is not None, (
            "R8: ReduceLROnPlateau.step() called without the validation loss"
        )
        assert event.info["mode"] == "min", (
            f"R8: mode '{event.info['mode']}' for a loss; lower is better, so 'min'"
        )
        assert event.info["metric"] == row["val_loss"], (
            f"R8: epoch {epoch} stepped the scheduler with {event.info['metric']:.6g}, "
            f"not its validation loss {row['val_loss']:.6g}"
        )
        events = enumerate(recorder.events)
        validation = [i for i, e in events if e.epoch == epoch and e.phase == "val"]
        assert validation and index > validation[-1], (
            f"R8: the scheduler stepped before epoch {epoch}'s validation"
        )


def test_R9_the_model_trains_in_training_mode_every_epoch(run):
    cfg, recorder, result, error = run
    for event in recorder.events:
        if event.name == "forward" and event.phase == "train":
            assert event.info["training"], (
                f"R9: the model is in eval mode during training (epoch {event.epoch}): "
                "call model.train() at the start of every epoch"
            )


def test_R10_validation_runs_in_eval_mode_without_autograd(run):
    cfg, recorder, result, error = run
    forwards = [e for e in recorder.events if e.phase == "val" and e.name.startswith("forward")]
    assert forwards, "R10: no validation pass was recorded"
    for event in forwards:
        if event.name == "forward":
            assert not event.info["training"], (
                f"R10: the model is in training mode during validation (epoch {event.epoch})"
            )
            assert not event.info["grad"], (
                f"R10: validation builds an autograd graph (epoch {event.epoch}); "
                "run it under torch.no_grad()"
            )
        else:
            assert not event.info["grad_fn"], (
                f"R10: validation outputs carry a grad_fn (epoch {event.epoch})"
            )


def test_R11_the_loop_keeps_numbers_not_graphs(run):
    cfg, recorder, result, error = run
    for epoch, batch, alive in recorder.leaks:
        pytest.fail(
            f"R11: at epoch {epoch}, batch {batch}, the autograd graphs of {alive} earlier steps "
            "were still alive: the loop keeps tensors (log loss.item() or loss.detach())"
        )
    for row in result["history"] if result else []:
        for key, value in row.items():
            assert type(value) in (int, float), (
                f"R11: history['{key}'] is a {type(value).__name__}, not a number"
            )


def test_R12_epoch_metrics_are_per_sample_means(tmp_path):
    cfg = small_config(tmp_path, dropout=0.0)
    device = torch.device(DEVICE)
    data = data_module.load_data(cfg)
    model = build_model(cfg, data.train.features.shape[1], data.task.output_dim).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # no update: the weights stay fixed
    # Batches of n-1 and 1 samples: a per-batch mean gives the single sample half the weight.
    train_batches = data_module.Batches(
        data.train, len(data.train) - 1, shuffle=True, device=device
    )
    val_batches = data_module.Batches(data.val, len(data.val) - 1, shuffle=False, device=device)
    amp_dtype = train.autocast_dtype("auto", device)
    scaler = torch.amp.GradScaler(device.type, enabled=False)
    trained = train_one_epoch(
        model,
        train_batches,
        optimizer,
        data.task,
        scaler=scaler,
        amp_dtype=amp_dtype,
        max_grad_norm=cfg.max_grad_norm,
    )
    validated = evaluate(model, val_batches, data.task, amp_dtype=amp_dtype)

    model.eval()
    for split, measured in ((data.train, trained), (data.val, validated)):
        features, targets = split.features.to(device), split.targets.to(device)
        with torch.no_grad(), torch.autocast(device.type, dtype=amp_dtype):
            outputs = model(features)
            loss = data.task.loss(outputs, targets).item()
        sums = {k: v.item() for k, v in data.task.batch_stats(outputs, targets).items()}
        expected = {"loss": loss, **data.task.epoch_metrics(sums, len(targets))}
        for key in measured.keys() - {"skipped_steps"}:  # a count of steps, not a mean
            value = expected[key]
            assert measured[key] == pytest.approx(value, rel=1e-2, abs=1e-4), (
                f"R12: epoch {key} is {measured[key]:.6g}; the per-sample mean over the "
                f"{len(targets)} samples is {value:.6g}"
            )


def test_R13_early_stopping_stops_after_patience_and_keeps_the_best_weights(tmp_path, monkeypatch):
    cfg = small_config(tmp_path, epochs=8, patience=3, plateau_patience=1)
    # Validation losses as scripted: the best is epoch 2's, and nothing beats it afterwards.
    scripted = [1.0, 0.5, 0.6, 0.55, 0.7, 0.65, 0.8, 0.75]
    weights = {}
    real_evaluate = train.evaluate

    def scripted_evaluate(model, *args, **kwargs):
        metrics = real_evaluate(model, *args, **kwargs)
        epoch = len(weights) + 1
        weights[epoch] = {k: v.detach().clone() for k, v in model.state_dict().items()}
        return {**metrics, "loss": scripted[epoch - 1]}

    monkeypatch.setattr(train, "evaluate", scripted_evaluate)
    result = train.fit(cfg)
    ran = len(result["history"])
    assert ran == 2 + cfg.patience, (
        f"R13: training ran {ran} epochs; the best was epoch 2 and patience is {cfg.patience}, "
        f"so it should stop after epoch {2 + cfg.patience}"
    )
    best = torch.load(f"{cfg.out}/best.pt", weights_only=True)
    assert best["epoch"] == 2, f"R13: best.pt is epoch {best['epoch']}'s, the best epoch was 2"
    final = result["model"].state_dict()
    for name, tensor in final.items():
        assert torch.equal(tensor, weights[2][name]), (
            "R13: training ended with the last epoch's weights, not the best epoch's"
        )
