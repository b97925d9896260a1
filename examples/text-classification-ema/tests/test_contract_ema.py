"""Contract tests of the weight average (E1, E3; test_contract.py judges E2 on its run)."""

import dataclasses

import pytest
import torch

import conftest
import contract_config
from text_classification_ema import data as data_module
from text_classification_ema import run_files, train
from text_classification_ema.checkpoint import load_checkpoint
from text_classification_ema.ema import WeightAverage
from text_classification_ema.engine import train_one_epoch
from text_classification_ema.model import build_model

small_config = contract_config.small_config  # the small run of every contract test


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
