"""Watches a real training run through torch's hooks and records the state the loop leaves.

The contract tests (test_contract.py, test_contract_warmup.py) judge these records. They never
read the source and barely care which function was called: a loop rewritten correctly, in any
style, passes, and one that breaks a rule fails, naming the rule.

What the recorder touches, all undone when `watch()` ends:
- the model that `train.build_model` returns: forward hooks (mode, grad mode, autocast), a hook
  on its output's gradient (the moment backward reaches this step's graph), and a hook on each
  parameter that sees this batch's gradient, from backward() or torch.autograd.grad;
- torch's global optimizer step pre-hook (the gradients and learning rate of every update) and
  post-hook (for an optimizer whose closure computes the gradients inside step());
- the project's `Batches.__iter__`: which epoch, phase and batch the loop is in;
- methods of torch classes, which no import style can bypass: `GradScaler.scale`, `.step`,
  `.update` (which update the scaler made, and the scale of each backward); the `__init__` of
  `Optimizer` and of the schedulers (to find them, and read their state after each epoch);
  `ReduceLROnPlateau.step` (a metric-less step, which torch refuses with a TypeError, is
  recorded and skipped, so the R8 test can name it).

What it assumes, and what to change when that no longer holds:
- `train.build_model(...)` returns the model (set MODEL_BUILDER to your function's name);
- training batches come from iterating a `data.Batches` whose `shuffle` is true, validation
  from one whose `shuffle` is false. With a DataLoader instead, pass
  `watch(train, data, batches_class=torch.utils.data.DataLoader, is_training=lambda loader:
  isinstance(loader.sampler, torch.utils.data.RandomSampler))`;
- the model returns a tensor, or a tuple, list or dict whose first tensor is the prediction;
- one optimizer update per batch (gradient accumulation would need R14's checks instead), and
  an optimizer that leaves `.grad` as it found it (all of torch's do).
A broken assumption raises RecorderSetupError naming it, not an AttributeError.
"""

import contextlib
import functools
import math
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
import torch
from torch.optim.lr_scheduler import LRScheduler, ReduceLROnPlateau
from torch.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)

MODEL_BUILDER = "build_model"  # the function in train.py that returns the model


class RecorderSetupError(RuntimeError):
    """The project no longer matches what the recorder assumes (see the module docstring)."""


@dataclass
class Forward:
    phase: str  # train, val, or setup/between outside a batch
    epoch: int
    training: bool  # every module of the model in training mode
    grad: bool  # grad mode on
    autocast: bool
    autocast_dtype: torch.dtype
    output_has_grad_fn: bool = False


@dataclass
class Update:
    """One optimizer update, or one the GradScaler skipped (fp16 overflow)."""

    skipped: bool
    after_backward: bool  # this batch's backward had accumulated gradients before it
    in_scaler_step: bool  # made by GradScaler.step
    lrs: list[float] = field(default_factory=list)
    true_norm: float = math.nan  # this batch's gradient norm, unscaled
    step_norm: float = math.nan  # the norm of the gradients the update used
    # How far the update's gradients are from a uniform rescale of this batch's: 0 when they
    # are this batch's gradients, clipped or not.
    deviation: float = math.nan
    optimizer_matches_model: bool = True


@dataclass
class Step:
    """What happened between the arrival of one training batch and the next."""

    epoch: int
    batch: int
    backwards: int = 0  # backward passes that reached this batch's output
    stale: list[str] = field(default_factory=list)  # parameters holding older gradients then
    autocast_in_backward: bool = False
    scaled_backward: bool = False  # backward went through GradScaler.scale(loss)
    scale: float = 1.0  # the loss scale of that backward
    updates: list[Update] = field(default_factory=list)
    scaler_updates: int = 0  # GradScaler.update calls
    scaler_update_before_step: bool = False


class LoopRecorder:
    """Records one run; `watch()` installs the hooks and removes them after."""

    def __init__(self) -> None:
        self.epoch, self.phase, self.batch = 0, "setup", -1
        self.model: torch.nn.Module | None = None
        self.optimizers: list = []  # every optimizer built during the run
        self.scalers: list = []
        self.schedulers: list = []  # every learning-rate scheduler built during the run
        self.forwards: list[Forward] = []
        self.steps: list[Step] = []
        self.scheduler_states: list[dict] = []  # each scheduler at the end of each epoch
        self.metricless_plateau_steps = 0
        self.leaks: list[tuple[int, int, int]] = []  # (epoch, batch, graphs of older steps alive)
        self._markers: list = []
        self._accumulated: dict[int, torch.Tensor] = {}  # param id -> its gradient after backward
        self._hooked: dict[int, weakref.ref] = {}  # parameters whose accumulation is watched
        self._scaled: list = []  # whether backward went through each scaler.scale output
        self._in_scaler_step = False

    # --- phases, from the project's batch iterators -------------------------------------
    def _iterate(self, iterate, is_training):
        recorder = self

        def recorded(batches):
            training = is_training(batches)
            if training:
                recorder._end_epoch()
                recorder.epoch += 1
            recorder.phase = "train" if training else "val"
            for i, batch in enumerate(iterate(batches)):
                recorder.batch = i
                if training:
                    recorder.steps.append(Step(recorder.epoch, i))
                    recorder._accumulated, recorder._scaled = {}, []
                yield batch
            recorder.phase, recorder.batch = "between", -1

        return recorded

    def _end_epoch(self) -> None:
        if self.epoch > 0:
            self.scheduler_states.append(
                {
                    "epoch": self.epoch,
                    "schedulers": [
                        {
                            "last_epoch": s.last_epoch,
                            "best": getattr(s, "best", None),  # plateau schedulers only
                            "mode": getattr(s, "mode", None),
                        }
                        for s in self.schedulers
                    ],
                }
            )

    def step(self) -> Step | None:
        """The training step in progress, if any."""
        return self.steps[-1] if self.phase == "train" and self.steps else None

    # --- the model ----------------------------------------------------------------------
    def _before_forward(self, module, inputs):
        device_type = _device_type(module)
        self.forwards.append(
            Forward(
                self.phase,
                self.epoch,
                training=all(m.training for m in module.modules()),
                grad=torch.is_grad_enabled(),
                autocast=torch.is_autocast_enabled(device_type),
                autocast_dtype=torch.get_autocast_dtype(device_type),
            )
        )
        for parameter in module.parameters():  # also parameters replaced since the last step
            known = self._hooked.get(id(parameter))
            if parameter.requires_grad and (known is None or known() is not parameter):
                parameter.register_hook(functools.partial(self._on_grad, parameter))
                self._hooked[id(parameter)] = weakref.ref(parameter)

    def _after_forward(self, module, inputs, output):
        prediction, rebuild = _prediction(output)
        self.forwards[-1].output_has_grad_fn = prediction.grad_fn is not None
        if not torch.is_grad_enabled() or self.phase != "train":
            return None
        # A zero leaf joined to this step's graph lives exactly as long as that graph. The
        # previous step's graph may still be bound to the loop's variables; older ones must be
        # gone, or the loop is keeping tensors instead of numbers (R11).
        alive = [m for m in self._markers if m[2]() is not None]
        if len(alive) > 1:
            self.leaks.append((self.epoch, self.batch, len(alive) - 1))
        marker = torch.zeros((), device=prediction.device, dtype=prediction.dtype)
        marker.requires_grad_(True)
        self._markers = alive[-1:] + [(self.epoch, self.batch, weakref.ref(marker))]
        prediction = prediction + marker
        step = self.step()
        if step is not None:
            prediction.register_hook(lambda grad: self._backward_reached(step))
        return rebuild(prediction)

    def _backward_reached(self, step: Step) -> None:
        """Backward has reached this step's output; no parameter gradient is accumulated yet."""
        step.backwards += 1
        step.autocast_in_backward = torch.is_autocast_enabled(_device_type(self.model))
        step.stale = [
            name
            for name, p in self.model.named_parameters()
            if p.grad is not None and bool(p.grad.any())
        ]
        step.scaled_backward = any(ref.fired for ref in self._scaled)

    def _on_grad(self, parameter, grad) -> None:
        # A leaf's tensor hook sees this batch's gradient, from backward() or autograd.grad.
        if self.step() is not None:
            self._accumulated[id(parameter)] = grad.detach().clone()

    def _after_update(self, optimizer, args, kwargs):
        # A closure computes the gradients inside step(), after the pre-hook: measure again.
        step = self.step()
        if step is None or not step.updates or step.updates[-1].after_backward:
            return
        if self._accumulated:
            update = step.updates[-1]
            update.after_backward = True
            self._measure(update, optimizer, step, 1.0)

    # --- updates ------------------------------------------------------------------------
    def _before_update(self, optimizer, args, kwargs):
        step = self.step()
        if step is None:
            return
        # A fused optimizer under an fp16 GradScaler gets still-scaled gradients, with the scale
        # and the overflow flag as attributes, and skips an overflowed update itself.
        grad_scale = getattr(optimizer, "grad_scale", None)
        found_inf = getattr(optimizer, "found_inf", None)
        overflowed = found_inf is not None and bool(found_inf.item())
        if self._in_scaler_step and step.updates and step.updates[-1].in_scaler_step:
            update = step.updates[-1]  # made by GradScaler.step, and applied unless overflowed
            update.skipped = overflowed
        else:
            update = Update(False, bool(self._accumulated), self._in_scaler_step)
            step.updates.append(update)
        unscale = 1.0 if grad_scale is None else float(grad_scale)
        self._measure(update, optimizer, step, unscale)

    def _measure(self, update: Update, optimizer, step: Step, unscale: float) -> None:
        update.lrs = [group["lr"] for group in optimizer.param_groups]
        parameters = [p for p in self.model.parameters() if p.requires_grad]
        in_optimizer = {id(p) for group in optimizer.param_groups for p in group["params"]}
        update.optimizer_matches_model = in_optimizer == {id(p) for p in parameters}
        accumulated = [self._accumulated[id(p)] for p in parameters if id(p) in self._accumulated]
        if not accumulated:
            return
        pairs = [
            (p.grad.detach().double() / unscale, self._accumulated[id(p)].double() / step.scale)
            for p in parameters
            if id(p) in self._accumulated and p.grad is not None
        ]
        update.true_norm = _norm([a.double() / step.scale for a in accumulated])
        update.step_norm = _norm([used for used, _ in pairs]) if pairs else 0.0
        if pairs and update.true_norm > 0 and math.isfinite(update.true_norm):
            ratio = update.step_norm / update.true_norm
            off = _norm([used - ratio * own for used, own in pairs])
            update.deviation = off / max(update.step_norm, 1e-30)

    @contextlib.contextmanager
    def watch(
        self,
        train_module,
        data_module,
        batches_class=None,
        is_training: Callable[[object], bool] = lambda batches: batches.shuffle,
    ):
        """Record one run of train_module.fit (or anything else that trains)."""
        recorder = self
        batches_class = batches_class or _required(data_module, "Batches", "the batch iterator")
        build_model = _required(train_module, MODEL_BUILDER, "the function that builds the model")
        with pytest.MonkeyPatch.context() as mp:

            def recorded_build_model(*args, **kwargs):
                model = build_model(*args, **kwargs)
                if not isinstance(model, torch.nn.Module):
                    raise RecorderSetupError(
                        f"{MODEL_BUILDER} returned a {type(model).__name__}, not a torch "
                        "nn.Module; set MODEL_BUILDER in tests/loop_recorder.py"
                    )
                recorder.model = model
                model.register_forward_pre_hook(recorder._before_forward)
                model.register_forward_hook(recorder._after_forward)
                return model

            mp.setattr(train_module, MODEL_BUILDER, recorded_build_model)
            iterate = self._iterate(batches_class.__iter__, is_training)
            mp.setattr(batches_class, "__iter__", iterate)
            self._watch_torch_classes(mp)
            # Make .to() replace parameters (as a dtype change or some devices do), so an
            # optimizer built before the move is caught on any machine (R1).
            overwrite = torch.__future__.get_overwrite_module_params_on_conversion()
            torch.__future__.set_overwrite_module_params_on_conversion(True)
            handle = register_optimizer_step_pre_hook(self._before_update)
            post = register_optimizer_step_post_hook(self._after_update)
            try:
                yield self
            finally:
                handle.remove()
                post.remove()
                torch.__future__.set_overwrite_module_params_on_conversion(overwrite)
                self._end_epoch()

    def _watch_torch_classes(self, mp) -> None:
        recorder = self

        def wrap_init(kind, instances: list) -> None:
            init = kind.__init__

            def recorded_init(obj, *args, **kwargs):
                if not any(obj is known for known in instances):
                    instances.append(obj)
                return init(obj, *args, **kwargs)

            mp.setattr(kind, "__init__", recorded_init)

        wrap_init(torch.optim.Optimizer, recorder.optimizers)

        scale = torch.amp.GradScaler.scale

        def recorded_scale(scaler, outputs):
            if scaler not in recorder.scalers:
                recorder.scalers.append(scaler)
            scaled = scale(scaler, outputs)
            step = recorder.step()
            if step is not None and isinstance(scaled, torch.Tensor) and scaled.requires_grad:
                step.scale = scaler.get_scale() if scaler.is_enabled() else 1.0
                seen = _Fired()
                scaled.register_hook(seen.fire)  # fires only if backward starts at or above it
                recorder._scaled.append(seen)
            return scaled

        mp.setattr(torch.amp.GradScaler, "scale", recorded_scale)
        scaler_step = torch.amp.GradScaler.step

        def recorded_scaler_step(scaler, optimizer, *args, **kwargs):
            step = recorder.step()
            if step is not None:
                # Recorded as skipped until the optimizer's own step runs inside this call.
                step.updates.append(
                    Update(skipped=True, after_backward=bool(recorder._accumulated),
                           in_scaler_step=True)
                )  # fmt: skip
            recorder._in_scaler_step = True
            try:
                return scaler_step(scaler, optimizer, *args, **kwargs)
            finally:
                recorder._in_scaler_step = False

        mp.setattr(torch.amp.GradScaler, "step", recorded_scaler_step)
        scaler_update = torch.amp.GradScaler.update

        def recorded_scaler_update(scaler, *args, **kwargs):
            step = recorder.step()
            if step is not None:
                step.scaler_updates += 1
                step.scaler_update_before_step |= not step.updates
            return scaler_update(scaler, *args, **kwargs)

        mp.setattr(torch.amp.GradScaler, "update", recorded_scaler_update)

        for kind in (LRScheduler, ReduceLROnPlateau):
            wrap_init(kind, recorder.schedulers)
        plateau_step = ReduceLROnPlateau.step

        def recorded_plateau_step(scheduler, *args, **kwargs):
            metric = args[0] if args else kwargs.get("metrics")
            if metric is None:  # torch raises here; the plateau's state then says what happened
                recorder.metricless_plateau_steps += 1
                return None
            return plateau_step(scheduler, *args, **kwargs)

        mp.setattr(ReduceLROnPlateau, "step", recorded_plateau_step)

    # --- views used by the tests --------------------------------------------------------
    def train_forwards(self) -> list[Forward]:
        return [f for f in self.forwards if f.phase == "train"]

    def val_forwards(self) -> list[Forward]:
        return [f for f in self.forwards if f.phase == "val"]

    def updates_of_epoch(self, epoch: int) -> list[Update]:
        return [u for s in self.steps if s.epoch == epoch for u in s.updates]


class _Fired:
    """Remembers whether backward went through the tensor whose hook `fire` is."""

    fired = False

    def fire(self, grad) -> None:
        self.fired = True


def _required(module, name: str, what: str):
    if not hasattr(module, name):
        raise RecorderSetupError(
            f"{module.__name__}.{name} not found: the recorder needs {what}; if you renamed or "
            "replaced it, see the top of tests/loop_recorder.py"
        )
    return getattr(module, name)


def _prediction(output):
    """The prediction tensor in a model's output, and a function that puts one back."""
    if isinstance(output, torch.Tensor):
        return output, lambda tensor: tensor
    if isinstance(output, dict):
        keys = [k for k, v in output.items() if isinstance(v, torch.Tensor)]
        if keys:
            return output[keys[0]], lambda tensor: {**output, keys[0]: tensor}
    if isinstance(output, (tuple, list)):
        places = [i for i, v in enumerate(output) if isinstance(v, torch.Tensor)]
        if places:
            first = places[0]
            return output[first], lambda tensor: type(output)(
                [tensor if i == first else v for i, v in enumerate(output)]
            )
    raise RecorderSetupError(
        f"the model returned a {type(output).__name__} without a tensor; the recorder follows "
        "the first tensor of a model's output (see the top of tests/loop_recorder.py)"
    )


def _device_type(module) -> str:
    parameter = next(module.parameters(), None)
    return parameter.device.type if parameter is not None else "cpu"


def _norm(tensors: list[torch.Tensor]) -> float:
    if not tensors:
        return 0.0
    return torch.linalg.vector_norm(
        torch.stack([torch.linalg.vector_norm(t.double()) for t in tensors])
    ).item()
