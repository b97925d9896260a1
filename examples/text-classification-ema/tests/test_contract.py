"""Contract tests: watch a small real run and check the loop rules by the state it leaves.

Each failure message starts with the rule it breaks (R1-R13; see the project README).
Nothing here reads the source, and hardly anything counts calls: each rule is checked on what
the loop does to the gradients, the optimizer and the model (tests/loop_recorder.py says how),
so a loop rewritten correctly in any style passes.
"""

import dataclasses
import math

import pytest
import torch

import conftest
import loop_recorder
from text_classification_ema import data as data_module
from text_classification_ema import run_files, train
from text_classification_ema.checkpoint import load_checkpoint
from text_classification_ema.config import Config
from text_classification_ema.ema import WeightAverage
from text_classification_ema.engine import (
    evaluate,
    train_one_epoch,
)
from text_classification_ema.model import build_model
from text_classification_ema.predict import Predictor


def small_config(tmp_path, **changes) -> Config:
    # The task's small model (conftest.py). 330 samples: 264 to train on (4 batches of 64 and
    # one of 8) and 66 to validate (64 + 2).
    settings = {"n_samples": 330, "epochs": 3, "out": str(tmp_path / "run")}
    return conftest.small_config(**{**settings, **changes})


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One short recorded run of train.fit."""
    cfg = small_config(tmp_path_factory.mktemp("contract"))
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


def judged_steps(recorder):
    """Training steps with (epoch, batch) labels; steps of a wrong optimizer are R1's to report."""
    steps = [s for s in recorder.steps if all(u.optimizer_matches_model for u in s.updates)]
    assert steps, "R3: no training step was recorded"
    return [(f"(epoch {s.epoch}, batch {s.batch})", s) for s in steps]


def test_R2_backward_starts_from_cleared_gradients(run):
    cfg, recorder, result, error = run
    for where, step in judged_steps(recorder):
        assert not step.stale, (
            f"R2: when backward() began, {len(step.stale)} parameters (e.g. {step.stale[0]}) "
            f"still held an earlier step's gradients: clear them before backward() {where}"
        )
        for update in step.updates:
            if update.after_backward and not update.skipped:
                assert update.step_norm > 0 or update.true_norm == 0, (
                    "R2: the gradients were cleared between backward() and the update, which "
                    f"then used none {where}"
                )


def test_R3_each_batch_makes_one_update_with_its_own_gradients(run):
    cfg, recorder, result, error = run
    for where, step in judged_steps(recorder):
        assert step.backwards == 1, f"R3: {step.backwards} backward passes for one batch {where}"
        assert len(step.updates) == 1, (
            f"R3: {len(step.updates)} optimizer updates for one batch {where}"
        )
        update = step.updates[0]
        assert update.after_backward, f"R3: the optimizer updated before backward() {where}"
        if update.skipped or not math.isfinite(update.true_norm):
            continue  # fp16 overflow: the scaler skips this update by design
        assert update.step_norm == pytest.approx(update.true_norm, rel=1e-4, abs=1e-12), (
            f"R3: the update used gradients of norm {update.step_norm:.6g}; this batch's "
            f"backward() gave {update.true_norm:.6g} {where}"
        )
        if math.isfinite(update.deviation):
            assert update.deviation < 1e-4, (
                f"R3: the update's gradients point elsewhere than this batch's (relative "
                f"difference {update.deviation:.3g}) {where}"
            )


def plateau_state(state: dict) -> dict:
    """The ReduceLROnPlateau among the schedulers recorded at the end of an epoch."""
    return [s for s in state["schedulers"] if s["mode"] is not None][-1]


def test_R8_the_plateau_schedule_follows_the_validation_loss(run):
    cfg, recorder, result, error = run
    history = result["history"] if result else []
    assert history, "R8: no epoch finished"
    assert recorder.schedulers, "R8: no ReduceLROnPlateau was built"
    assert not recorder.metricless_plateau_steps, (
        "R8: ReduceLROnPlateau.step() called without the validation loss"
    )
    states = {state["epoch"]: plateau_state(state) for state in recorder.scheduler_states}
    for row in history:
        epoch = row["epoch"]
        state = states[epoch]
        assert state["mode"] == "min", (
            f"R8: mode '{state['mode']}' for a loss; lower is better, so 'min'"
        )
        assert state["last_epoch"] == epoch, (
            f"R8: after epoch {epoch} the scheduler had stepped {state['last_epoch']} times, "
            "not once per epoch"
        )
        best = min(r["val_loss"] for r in history if r["epoch"] <= epoch)
        assert state["best"] == best, (
            f"R8: after epoch {epoch} the scheduler's best is {state['best']:.6g}, the best "
            f"validation loss so far is {best:.6g}: step it with this epoch's validation loss"
        )


def test_R9_the_model_trains_in_training_mode_every_epoch(run):
    cfg, recorder, result, error = run
    for forward in recorder.train_forwards():
        assert forward.training, (
            f"R9: the model is in eval mode during training (epoch {forward.epoch}): "
            "call model.train() at the start of every epoch"
        )


def test_R10_validation_runs_in_eval_mode_without_autograd(run):
    cfg, recorder, result, error = run
    forwards = recorder.val_forwards()
    assert forwards, "R10: no validation pass was recorded"
    for forward in forwards:
        assert not forward.training, (
            f"R10: the model is in training mode during validation (epoch {forward.epoch})"
        )
        assert not forward.grad and not forward.output_has_grad_fn, (
            f"R10: validation builds an autograd graph (epoch {forward.epoch}); "
            "run it under torch.no_grad()"
        )


def test_R10_evaluate_puts_a_model_in_training_mode_into_eval_mode(tmp_path):
    # evaluate() sets eval mode itself: the evaluate command and the predictor hand it a model
    # just built (in training mode), and training's validation runs on the average's copy,
    # always in eval mode, so the run above could not see a missing model.eval().
    cfg = small_config(tmp_path)
    device = torch.device(conftest.DEVICE)
    data = data_module.load_data(cfg)
    model = build_model(cfg, data.input_shape, data.task.output_dim).to(device).train()
    modes = []
    model.register_forward_pre_hook(lambda module, args: modes.append(module.training))
    batches = data_module.Batches(data.val, cfg.batch_size, shuffle=False, device=device)
    evaluate(model, batches, data.task)
    assert modes and not any(modes), "R10: evaluate() ran the model in training mode"


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


class RecordingTask:
    """The project's task, recording each batch's loss and size as the loop computes them."""

    def __init__(self, task) -> None:
        self.task, self.batches = task, []

    def __getattr__(self, name):
        return getattr(self.task, name)

    def loss(self, outputs, targets):
        loss = self.task.loss(outputs, targets)
        self.batches.append((loss.item(), len(targets)))
        return loss


def two_batches(split, device) -> list:
    """The split as batches of n-1 samples and 1: a per-batch mean gives the 1 half the weight."""
    whole = data_module.Batches(split, len(split), shuffle=False, device=device)
    inputs, targets = next(iter(whole))
    return [(inputs[:-1], targets[:-1]), (inputs[-1:], targets[-1:])]


def test_R12_epoch_metrics_are_per_sample_means(tmp_path):
    cfg = small_config(tmp_path, dropout=0.0)
    device = torch.device(conftest.DEVICE)
    data = data_module.load_data(cfg)
    model = build_model(cfg, data.input_shape, data.task.output_dim).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # no update: the weights stay fixed
    recording = RecordingTask(data.task)
    trained = train_one_epoch(
        model,
        two_batches(data.train, device),
        optimizer,
        recording,
    )
    # Training: the mean of the losses the loop computed, each weighted by its batch's size.
    expected = sum(loss * n for loss, n in recording.batches) / sum(n for _, n in recording.batches)
    assert trained["loss"] == pytest.approx(expected, rel=1e-4, abs=1e-6), (
        f"R12: the epoch's training loss is {trained['loss']:.6g}; the per-sample mean of its "
        f"batches' losses ({recording.batches}) is {expected:.6g}"
    )

    # Validation: every metric over two batches equals that of the whole split at once.
    validated = evaluate(model, two_batches(data.val, device), data.task)
    model.eval()
    whole = data_module.Batches(data.val, len(data.val), shuffle=False, device=device)
    inputs, targets = next(iter(whole))
    with torch.no_grad():
        outputs = model(inputs)
        loss = data.task.loss(outputs, targets).item()
    sums = {k: v.item() for k, v in data.task.batch_stats(outputs, targets).items()}
    expected = {"loss": loss, **data.task.epoch_metrics(sums, len(targets))}
    for key, value in expected.items():
        assert validated[key] == pytest.approx(value, rel=1e-2, abs=1e-4), (
            f"R12: validation {key} is {validated[key]:.6g}; the per-sample mean over the "
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


def snapshot(module) -> dict:
    return {name: tensor.detach().clone() for name, tensor in module.state_dict().items()}


def applied_steps(optimizer) -> int:
    """The updates the optimizer applied: a step the GradScaler skipped leaves its count."""
    first = optimizer.param_groups[0]["params"][0]
    return int(optimizer.state.get(first, {}).get("step", 0))


def test_E1_the_average_takes_in_each_applied_update_right_after_it(tmp_path):
    cfg = small_config(tmp_path)
    device = torch.device(conftest.DEVICE)
    data = data_module.load_data(cfg)
    torch.manual_seed(cfg.seed)  # the same weights whichever tests ran before
    model = build_model(cfg, data.input_shape, data.task.output_dim).to(device)
    optimizer = train.build_optimizer(model, cfg)
    average = WeightAverage(model, cfg.ema_decay)
    # The average as E1 defines it, computed here from the weights each applied update left:
    # it starts from the initial weights and takes in each update right after it.
    expected, updates = snapshot(model), 0

    def take_in(optimizer, args, kwargs):
        nonlocal updates
        if applied_steps(optimizer) == updates:
            return  # a step the GradScaler skipped: the weights did not move
        updates += 1
        decay = min(cfg.ema_decay, (1 + updates) / (10 + updates))
        for name, tensor in model.state_dict().items():
            if tensor.is_floating_point():
                expected[name].lerp_(tensor, 1.0 - decay)
            else:
                expected[name].copy_(tensor)

    hook = optimizer.register_step_post_hook(take_in)
    batches = list(data_module.Batches(data.train, cfg.batch_size, shuffle=False, device=device))
    steps = 2 * len(batches)
    for _ in range(2):
        train_one_epoch(
            model,
            batches,
            optimizer,
            data.task,
            ema=average,
        )
    hook.remove()
    skipped = False  # fp32 skips no step
    if skipped:
        assert updates < steps, "E1: no step was skipped, so this test cannot see E1"
    else:
        assert updates == steps, f"E1: {updates} updates applied; the epochs make {steps} steps"
    assert average.updates == updates, (
        f"E1: the average took in {average.updates} updates; the optimizer applied {updates}: "
        "update the EMA once after each applied optimizer step, never after a skipped one"
    )
    for name, tensor in snapshot(average.module).items():
        gap = (tensor.double() - expected[name].double()).abs().max().item()
        assert gap <= 1e-6 + 1e-5 * expected[name].double().abs().max().item(), (
            f"E1: the average's {name} is {gap:.3g} from the average taken right after each "
            "applied update: update the EMA after the optimizer step, never before it"
        )


def validation_loss(cfg, data, weights: dict) -> float:
    """The validation loss of `weights`, through the engine's evaluate and the run's batches."""
    device = torch.device(conftest.DEVICE)
    model = build_model(cfg, data.input_shape, data.task.output_dim)
    model.load_state_dict(weights)
    model.to(device)
    size = cfg.val_batch_size or 4 * cfg.batch_size
    batches = data_module.Batches(data.val, size, shuffle=False, device=device)
    return evaluate(model, batches, data.task)["loss"]


def test_E2_validation_best_pt_and_predictions_use_the_averaged_weights(run):
    cfg, recorder, result, error = run
    assert error is None, f"the recorded run failed: {error!r}"
    last = load_checkpoint(f"{cfg.out}/last.pt")
    best = load_checkpoint(f"{cfg.out}/best.pt")
    data = result["data"]
    averaged = validation_loss(cfg, data, last["ema"]["weights"])
    trained = validation_loss(cfg, data, last["model"])
    assert averaged != trained, "E2: the average equals the weights, so this test cannot see E2"
    reported = result["history"][-1]["val_loss"]
    assert reported == pytest.approx(averaged, rel=1e-6, abs=1e-9), (
        f"E2: epoch {last['epoch']} reported val_loss {reported:.6g}; its averaged weights give "
        f"{averaged:.6g} (the trained ones {trained:.6g}): validate the EMA's weights"
    )
    best_loss = validation_loss(cfg, data, best["ema"]["weights"])
    assert best["best_val_loss"] == pytest.approx(best_loss, rel=1e-6, abs=1e-9), (
        f"E2: best.pt says {best['best_val_loss']:.6g}; its averaged weights give {best_loss:.6g}"
    )
    predictor = Predictor(best, f"{cfg.out}/best.pt", device=conftest.DEVICE)
    kept = best["ema"]["weights"]
    for name, tensor in predictor.model.state_dict().items():
        assert torch.equal(tensor.cpu(), kept[name].cpu()), (
            f"E2: predict loaded {name} from other weights than best.pt's average"
        )
    shipped = best["ema"]["weights"]  # R13: the best epoch's
    for name, tensor in result["model"].state_dict().items():
        assert torch.equal(tensor.cpu(), shipped[name].cpu()), (
            f"E2: fit returned a model whose {name} is not the validated average's"
        )


def test_E3_a_resumed_run_restores_the_average_and_ends_as_an_unbroken_run(tmp_path, monkeypatch):
    cfg = small_config(tmp_path, device="cpu", checkpoint_every_s=0.0)
    full = train.fit(dataclasses.replace(cfg, out=str(tmp_path / "full")))
    save = run_files.save_checkpoint

    def save_then_stop(state, path):
        save(state, path)
        if state["epoch"] == 1 and path.name == "last.pt":
            raise KeyboardInterrupt

    out = tmp_path / "resumed"
    monkeypatch.setattr(run_files, "save_checkpoint", save_then_stop)
    with pytest.raises(KeyboardInterrupt):
        train.fit(dataclasses.replace(cfg, out=str(out)))
    monkeypatch.undo()
    checkpoint = load_checkpoint(out / "last.pt")
    # Without it the resume is refused (the project's options say the checkpoint must hold
    # it): named here, so that the missing state is reported as the rule it breaks.
    assert "ema" in checkpoint, (
        "E3: the checkpoint holds no EMA state: save the average's weights and update count "
        "in each checkpoint and restore them on resume"
    )
    resumed = train.fit(dataclasses.replace(cfg, out=str(out)), checkpoint, out / "last.pt")
    for name, tensor in full["model"].state_dict().items():
        assert torch.equal(resumed["model"].state_dict()[name], tensor), (
            f"E3: resumed after epoch 1, the run ends with another average ({name}) than an "
            "unbroken run: save the EMA's weights and update count in each checkpoint and "
            "restore them on resume"
        )
    assert resumed["history"] == full["history"], (
        "E3: resumed after epoch 1, the run validates differently from an unbroken run"
    )
