"""Contract tests: watch one small real run and check the loop rules by the state it leaves.

Each failure message starts with the rule it breaks (R1-R14; see the project README).
Nothing here reads the source, and hardly anything counts calls: each rule is checked on what
the loop does to the gradients, the optimizer and the model (tests/loop_recorder.py says how),
so a loop rewritten correctly in any style passes. This file checks the rules one recorded run
of train.fit shows; the other tests/test_contract_*.py files check those that need runs of
their own (epoch metrics and early stopping, and where the project has them the EMA, gradient
accumulation and the warm-up).
"""

import math

import pytest

import contract_config
import loop_recorder
from regression_warmup_accum import data as data_module
from regression_warmup_accum import train

small_config = contract_config.small_config  # the small run of every contract test


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
        if math.isfinite(update.deviation):
            assert update.deviation < 1e-4, (
                f"R3: the update's gradients point elsewhere than this batch's (relative "
                f"difference {update.deviation:.3g}) {where}"
            )


def test_R4_each_update_uses_this_batch_gradients_clipped_to_max_norm(run):
    cfg, recorder, result, error = run
    clipped = 0
    for where, step in judged_steps(recorder):
        for update in step.updates:
            # Skipped (fp16 overflow) and non-finite updates are the scaler's to handle.
            if update.skipped or not math.isfinite(update.true_norm):
                continue
            # What clip_grad_norm_ gives, however it was reached: norms above max_norm scaled
            # down to it, smaller ones unchanged.
            expected = update.true_norm * min(1.0, cfg.max_grad_norm / (update.true_norm + 1e-6))
            clipped += update.true_norm > cfg.max_grad_norm
            assert update.step_norm == pytest.approx(expected, rel=1e-3, abs=1e-9), (
                f"R4: the update used a gradient norm of {update.step_norm:.6g}; this batch's "
                f"gradients ({update.true_norm:.6g}) clipped to max_grad_norm "
                f"{cfg.max_grad_norm} give {expected:.6g}: clip after backward() and before "
                f"the optimizer step {where}"
            )
    assert clipped, (
        f"R4: no batch had a gradient norm above max_grad_norm {cfg.max_grad_norm}, so this "
        "test cannot see clipping; lower max_grad_norm in small_config"
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
