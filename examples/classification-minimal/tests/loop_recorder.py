"""Watches a real training run through torch's public hooks and records what the loop did.

The contract tests read these records; they never read the source, so a loop rewritten
correctly keeps passing and one that breaks a rule fails, naming the rule.
"""

import contextlib
import weakref
from dataclasses import dataclass, field

import pytest
import torch
from torch.optim.lr_scheduler import LRScheduler, ReduceLROnPlateau
from torch.optim.optimizer import register_optimizer_step_pre_hook


@dataclass
class Event:
    name: str  # forward, backward, zero_grad, clip, step, scale, unscale_, scaler_step, ...
    epoch: int  # 1-based; 0 before the first training batch
    phase: str  # setup, train, val or between
    batch: int  # index of the batch within its phase, -1 outside one
    info: dict = field(default_factory=dict)


class LoopRecorder:
    """Records the calls of one run; `watch()` installs the hooks and removes them after."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.epoch, self.phase, self.batch = 0, "setup", -1
        self.model = None
        self.optimizers: list = []  # every optimizer built during the run
        self.scalers: list = []
        self.leaks: list[tuple[int, int, int]] = []  # (epoch, batch, graphs of older steps alive)
        self._markers: list = []
        self._scaled = None
        self._in_scaler_step = False

    def add(self, name: str, **info) -> None:
        self.events.append(Event(name, self.epoch, self.phase, self.batch, info))

    # Phases come from the project's batch iterators: shuffled ones are training data.
    def _iterate(self, iterate):
        recorder = self

        def recorded(batches):
            if batches.shuffle:
                recorder.epoch += 1
            recorder.phase = "train" if batches.shuffle else "val"
            for i, batch in enumerate(iterate(batches)):
                recorder.batch = i
                recorder.add("batch")
                yield batch
            recorder.phase, recorder.batch = "between", -1

        return recorded

    def _before_forward(self, module, inputs):
        device_type = inputs[0].device.type
        self.add(
            "forward",
            training=all(m.training for m in module.modules()),
            grad=torch.is_grad_enabled(),
            autocast=torch.is_autocast_enabled(device_type),
            autocast_dtype=torch.get_autocast_dtype(device_type),
        )

    def _after_forward(self, module, inputs, output):
        if not torch.is_grad_enabled() or self.phase != "train":
            self.add("forward_output", grad_fn=output.grad_fn is not None)
            return None
        # A zero leaf joined to this step's graph lives exactly as long as that graph.
        # The previous step's graph may still be bound to the loop's variables; older
        # ones must be gone, or the loop is keeping tensors instead of numbers.
        alive = [m for m in self._markers if m[2]() is not None]
        if len(alive) > 1:
            self.leaks.append((self.epoch, self.batch, len(alive) - 1))
        marker = torch.zeros((), device=output.device, dtype=output.dtype, requires_grad=True)
        self._markers = alive[-1:] + [(self.epoch, self.batch, weakref.ref(marker))]
        return output + marker

    def _before_step(self, optimizer, args, kwargs):
        grads = [p.grad for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
        norm = 0.0
        if grads:
            norm = torch.linalg.vector_norm(
                torch.stack([torch.linalg.vector_norm(g.float()) for g in grads])
            ).item()
        self.add("step", grad_norm=norm, has_grads=bool(grads), in_scaler_step=self._in_scaler_step)

    @contextlib.contextmanager
    def watch(self, train_module, data_module):
        """Record one run of train_module.fit (or anything else that trains)."""
        recorder = self
        with pytest.MonkeyPatch.context() as mp:
            build_model = train_module.build_model

            def recorded_build_model(*args, **kwargs):
                model = build_model(*args, **kwargs)
                recorder.model = model
                model.register_forward_pre_hook(recorder._before_forward)
                model.register_forward_hook(recorder._after_forward)
                return model

            mp.setattr(train_module, "build_model", recorded_build_model)
            mp.setattr(data_module.Batches, "__iter__", self._iterate(data_module.Batches.__iter__))

            def wrap(owner, name, event, info=lambda *args, **kwargs: {}):
                """Record `event` (with what `info` returns, unless None) around each call."""
                original = getattr(owner, name)

                def recorded(obj, *args, **kwargs):
                    details = info(obj, *args, **kwargs)
                    if details is not None:
                        recorder.add(event, **details)
                    return original(obj, *args, **kwargs)

                mp.setattr(owner, name, recorded)

            wrap(
                torch.optim.Optimizer,
                "__init__",
                "optimizer_built",
                lambda optimizer, *args, **kwargs: recorder.optimizers.append(optimizer) or {},
            )
            wrap(torch.optim.Optimizer, "zero_grad", "zero_grad")
            wrap(torch.nn.Module, "zero_grad", "zero_grad")
            wrap(
                torch.Tensor,
                "backward",
                "backward",
                lambda t, *a, **k: {
                    "autocast": torch.is_autocast_enabled(t.device.type),
                    "scaled": recorder._scaled is not None and recorder._scaled() is t,
                },
            )

            clip = torch.nn.utils.clip_grad_norm_

            def recorded_clip(parameters, max_norm, *args, **kwargs):
                total = clip(list(parameters), max_norm, *args, **kwargs)
                recorder.add("clip", norm=float(total), max_norm=float(max_norm))
                return total

            mp.setattr(torch.nn.utils, "clip_grad_norm_", recorded_clip)

            scale = torch.amp.GradScaler.scale

            def recorded_scale(scaler, outputs):
                if scaler not in recorder.scalers:
                    recorder.scalers.append(scaler)
                recorder.add("scale", enabled=scaler.is_enabled())
                scaled = scale(scaler, outputs)
                recorder._scaled = weakref.ref(scaled)
                return scaled

            mp.setattr(torch.amp.GradScaler, "scale", recorded_scale)
            wrap(torch.amp.GradScaler, "unscale_", "unscale_")
            wrap(torch.amp.GradScaler, "update", "update")
            scaler_step = torch.amp.GradScaler.step

            def recorded_scaler_step(scaler, optimizer, *args, **kwargs):
                recorder.add("scaler_step")
                recorder._in_scaler_step = True
                try:
                    return scaler_step(scaler, optimizer, *args, **kwargs)
                finally:
                    recorder._in_scaler_step = False

            mp.setattr(torch.amp.GradScaler, "step", recorded_scaler_step)

            # Schedulers step once while being built; that call is not the loop's.
            wrap(
                LRScheduler,
                "step",
                "scheduler_step",
                lambda *args, **kwargs: None if recorder.phase == "setup" else {},
            )
            plateau_step = ReduceLROnPlateau.step

            def recorded_plateau_step(scheduler, *args, **kwargs):
                metric = args[0] if args else kwargs.get("metrics")
                recorder.add(
                    "scheduler_step",
                    metric=None if metric is None else float(metric),
                    mode=scheduler.mode,
                )
                # Without a metric torch raises; skip the call so a test can name the bug.
                if metric is not None:
                    plateau_step(scheduler, *args, **kwargs)

            mp.setattr(ReduceLROnPlateau, "step", recorded_plateau_step)

            # Make .to() replace parameters (as a dtype change or some devices do), so an
            # optimizer built before the move is caught on any machine.
            overwrite = torch.__future__.get_overwrite_module_params_on_conversion()
            torch.__future__.set_overwrite_module_params_on_conversion(True)
            handle = register_optimizer_step_pre_hook(self._before_step)
            try:
                yield self
            finally:
                handle.remove()
                torch.__future__.set_overwrite_module_params_on_conversion(overwrite)

    # Views of the record used by the tests.
    def train_steps(self) -> list[tuple[int, int, list[Event]]]:
        """(epoch, batch, events) for each training batch: from its arrival to the next one."""
        steps = []
        for event in self.events:
            if event.name == "batch":
                if event.phase == "train":
                    steps.append((event.epoch, event.batch, []))
            elif event.phase == "train" and steps:
                steps[-1][2].append(event)
        return steps

    def of_epoch(self, epoch: int, name: str) -> list[tuple[int, Event]]:
        return [(i, e) for i, e in enumerate(self.events) if e.epoch == epoch and e.name == name]
