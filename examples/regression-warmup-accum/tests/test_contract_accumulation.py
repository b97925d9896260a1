"""Contract tests of gradient accumulation (R14): each window of batches is one optimizer step."""

import copy
import math

import pytest
import torch

import conftest
import contract_config
from regression_warmup_accum import data as data_module
from regression_warmup_accum import train
from regression_warmup_accum.config import Config
from regression_warmup_accum.engine import train_one_epoch
from regression_warmup_accum.model import build_model

small_config = contract_config.small_config  # the small run of every contract test


def has_batchnorm(model: torch.nn.Module) -> bool:
    return any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules())


def windows_of(batches: list, k: int) -> list:
    """The batches in windows of k, the last one shorter."""
    return [batches[i : i + k] for i in range(0, len(batches), k)]


def one_large_batch_step(model, window, optimizer, task, max_grad_norm, amp_dtype) -> None:
    """One plain optimizer step on the window's samples as one batch: what R14 asks for."""
    optimizer.zero_grad(set_to_none=True)
    samples = sum(len(targets) for _, targets in window)
    shapes = {tuple(inputs.shape[1:]) for inputs, _ in window}
    with torch.autocast(conftest.DEVICE, dtype=amp_dtype, enabled=amp_dtype is not None):
        if not has_batchnorm(model) and len(shapes) == 1:
            # Each sample's output depends on that sample alone: the window as one batch.
            inputs = torch.cat([inputs for inputs, _ in window])
            targets = torch.cat([targets for _, targets in window])
            loss = task.loss(model(inputs), targets)
        else:
            # BatchNorm normalises each forward pass with its own batch's statistics (and text
            # batches are padded to their own lengths): a window of small batches is then by
            # design not the same forward pass as one large batch. The same batches pass here
            # one by one, and one backward takes the mean loss over all the window's samples.
            loss = sum(task.loss(model(x), t) * (len(t) / samples) for x, t in window)
    loss.backward()
    if max_grad_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    optimizer.step()


# Measured on the CPU over the four tasks, 2 epochs of 2 steps: the accumulated and the
# one-batch weights differ by at most 1.5e-8 in float32 (the same sums in another order), and by
# up to 3.5e-4 under bf16 autocast (each batch's products rounded to 3 significant digits).
# The bounds are about 10x and 5x that.
R14_TOLERANCE = 2e-7


# "ragged": windows of k and a shorter last one, whose last batch is smaller; "short": an epoch
# of fewer batches than k, whose only window is the short one (it must still step).
EPOCH_SHAPES = ["ragged", "short"]


@pytest.mark.parametrize("clipped", [False, True], ids=["unclipped", "clipped"])
@pytest.mark.parametrize("shape", EPOCH_SHAPES)
def test_R14_each_accumulated_step_is_one_step_on_the_window_as_one_batch(tmp_path, shape, clipped):
    k = Config().grad_accum  # the project's own
    cfg = small_config(tmp_path, dropout=0.0)
    device = torch.device(conftest.DEVICE)
    data = data_module.load_data(cfg)
    torch.manual_seed(cfg.seed)  # the same weights whichever tests ran before
    model = build_model(cfg, data.input_shape, data.task.output_dim).to(device)
    reference = copy.deepcopy(model)
    batches = list(data_module.Batches(data.train, cfg.batch_size, shuffle=False, device=device))
    if shape == "short":
        batches = batches[-(k - 1) :]  # the smaller last batch among them
        assert len(batches) < k, f"R14: {len(batches)} batches make no epoch shorter than {k}"
    elif len(batches) % k == 0:
        batches = batches[1:]  # a last window one batch short, whatever the project's k
    sizes = [len(targets) for _, targets in batches]
    if shape == "ragged":
        assert len(batches) % k and sizes[-1] < sizes[0], (
            f"R14: this test needs ragged windows (a shorter last window, a smaller last batch); "
            f"batches of {sizes} in windows of {k} are not"
        )
    # Plain SGD: its update is the gradient itself, so a gradient of the wrong size shows
    # (Adam's would hide most of it: it divides the gradient by its own running size).
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    max_grad_norm = cfg.max_grad_norm if clipped else 1e9
    amp_dtype = None
    for epoch in (1, 2):  # the second starts after a shorter window: nothing may carry over
        train_one_epoch(
            model,
            batches,
            optimizer,
            data.task,
            max_grad_norm=max_grad_norm,
            grad_accum=k,
        )
        reference.train()
        for window in windows_of(batches, k):
            one_large_batch_step(
                reference, window, reference_optimizer, data.task, max_grad_norm, amp_dtype
            )
        apart = max(
            (a.double() - b.double()).abs().max().item()
            for a, b in zip(model.parameters(), reference.parameters(), strict=True)
        )
        assert apart <= R14_TOLERANCE, (
            f"R14: after epoch {epoch} the weights are {apart:.2e} from those of one step per "
            f"window of {k} batches (sizes {sizes}) on its samples as one batch: weight each "
            "batch's loss by its share of the window's samples, clear, clip and step once per "
            "window, and step the shorter last window before the epoch ends"
        )


class CountingBar:
    """A progress bar that counts how often it advanced."""

    def __init__(self) -> None:
        self.n = 0

    def update(self, n: int = 1) -> None:
        self.n += n

    def set_postfix_str(self, text: str) -> None:
        pass


def test_R14_steps_progress_and_logs_count_optimizer_steps(tmp_path):
    k = Config().grad_accum
    cfg = small_config(tmp_path, grad_accum=k, epochs=2)
    device = torch.device(conftest.DEVICE)
    data = data_module.load_data(cfg)
    model = build_model(cfg, data.input_shape, data.task.output_dim).to(device)
    optimizer = train.build_optimizer(model, cfg)
    batches = list(data_module.Batches(data.train, cfg.batch_size, shuffle=False, device=device))
    steps = math.ceil(len(batches) / k)
    bar = CountingBar()
    train_one_epoch(
        model,
        batches,
        optimizer,
        data.task,
        max_grad_norm=cfg.max_grad_norm,
        grad_accum=k,
        bar=bar,
    )
    made = optimizer.state[next(model.parameters())]["step"]
    assert made == steps, (
        f"R14: {int(made)} optimizer steps for {len(batches)} batches in windows of {k}; "
        f"expected {steps}, the last window shorter"
    )
    assert bar.n == steps, f"R14: the progress bar advanced {bar.n} times for {steps} steps"
    result = train.fit(cfg)
    saved = torch.load(f"{cfg.out}/last.pt", weights_only=True)
    assert len(result["history"]) == cfg.epochs
    assert saved["global_step"] == cfg.epochs * steps, (
        f"R14: last.pt counts {saved['global_step']} steps; {cfg.epochs} epochs of "
        f"{steps} optimizer steps make {cfg.epochs * steps}"
    )
