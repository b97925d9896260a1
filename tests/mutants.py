"""The silent training-loop bugs as code edits on a rendered project, and a runner for them.

`python -m tests.mutants [--all] [--out docs/mutation-table.md]` renders projects, injects
every bug that applies, runs each mutant's own test suite, and prints (and writes) the table
of which test caught which bug. `--rule K1 --bug TEXT --combo REGEX` run a part of it (with
`--list`, name the cases only), e.g. `python -m tests.mutants --combo 'tc$' --rule C4`.
tests/test_mutations.py runs the same mutants under pytest;
tests/equivalents.py runs correct rewrites of the loop through the same machinery.
"""

import argparse
import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import jinja2

from scaffold.options import Options
from tests import forkrun, tables
from tests.conftest import FACTORS, covering_set


class MutationError(Exception):
    """A mutant that no longer matches the rendered code: the template changed under it."""


@dataclass(frozen=True)
class Edit:
    kind: str  # replace, delete, move_after, move_before
    anchor: str  # text to replace, or text on the one line to delete or move
    other: str = ""  # the replacement, or text on the line to move next to


def _line_with(lines: list[str], text: str, file: str) -> int:
    found = [i for i, line in enumerate(lines) if text in line]
    if len(found) != 1:
        raise MutationError(f"{file}: {len(found)} lines contain {text!r}, expected 1")
    return found[0]


def apply_edit(path: Path, edit: Edit) -> None:
    source = path.read_text()
    if edit.kind == "replace":
        if source.count(edit.anchor) != 1:
            raise MutationError(
                f"{path.name}: {source.count(edit.anchor)} copies of {edit.anchor!r}"
            )
        path.write_text(source.replace(edit.anchor, edit.other))
        return
    lines = source.splitlines(keepends=True)
    moved = lines.pop(_line_with(lines, edit.anchor, path.name))
    if edit.kind != "delete":
        target = _line_with(lines, edit.other, path.name)
        indent = lines[target][: len(lines[target]) - len(lines[target].lstrip())]
        at = target + 1 if edit.kind == "move_after" else target
        lines.insert(at, indent + moved.lstrip())
    path.write_text("".join(lines))


def _always(options: Options) -> bool:
    return True


@dataclass(frozen=True)
class Mutant:
    rule: str
    bug: str
    file: str  # a module of the generated package
    edits: tuple[Edit, ...]
    applies: Callable[[Options], bool] = field(default=_always)
    tests: tuple[str, ...] = ()  # generated test files to run besides LOOP_TESTS

    @property
    def slug(self) -> str:
        return f"{self.rule}-" + re.sub(r"[^a-z0-9]+", "-", self.bug.lower()).strip("-")


_LOSS = "            loss = task.loss(outputs, targets)"
_STEP = "            scheduler.step()"
_PER_BATCH = "            for _ in range(len(train_batches)):\n    "


def _amp(o: Options) -> bool:
    return o.amp


def _images(o: Options) -> bool:
    return o.task == "image-classification"


def _text(o: Options) -> bool:
    return o.task == "text-classification"


_DATA_TESTS = ("tests/test_data.py",)
_STREAMING_TESTS = ("tests/test_streaming.py",)


def _fp32(o: Options) -> bool:
    return not o.amp


def _ema(o: Options) -> bool:
    return o.ema


# The optimizer step and the EMA update after it, as engine.py renders them.
_OPT_STEP = "        optimizer.step()  # R3: update with this batch's gradients\n"
_EMA_UPDATE = (
    "        if ema is not None:\n"
    "            ema.update()  # E1: after the step, so the average takes in the weights it just"
    " wrote\n"
)
_EMA_CALL = "            ema.update()\n"
_SCALER_STEP = (
    "        scaler.step(optimizer)  # R5: skips the update when the gradients overflowed\n"
    "        scaler.update()\n"
)


# The accumulating loop's last line per batch, and its EMA update after the window's step.
_WINDOW_SUM = (
    "            window_loss = window_loss + loss.detach()  # R11: detached, so no graph is kept\n"
)
_EMA_EVERY_BATCH = "            if ema is not None:\n                ema.update()\n"
_WINDOW_EMA_AMP = (
    "        if ema is not None and (\n"
    "            not scaler.is_enabled() or applied_updates(optimizer) > ema.updates\n"
    "        ):\n"
    "            ema.update()\n"
)


def _ddp(o: Options) -> bool:
    return o.distributed


def _compile(o: Options) -> bool:
    return o.compile


# The compile rules (K1, K2, C4) are seen by the generated tests/test_compile.py (probes).
_COMPILE_TESTS = ("tests/test_compile.py",)
_MIDEPOCH_TESTS = ("tests/test_midepoch.py",)


def _c5(o: Options) -> bool:
    """The covering set's base combinations (every task, one process and torchrun, each
    other option on and off) carry the mid-epoch code paths; the rest repeat them."""
    return not o.compile and not o.warmup_steps and o.grad_accum == 1


_COMPILED = "    compiled = compile_model(model) if cfg.compile else model\n"


def _one(o: Options) -> bool:
    return not o.distributed


def _accum(o: Options) -> bool:
    """The accumulating loop (grad_accum above 1): a different train_one_epoch."""
    return o.grad_accum > 1


def _per_batch(o: Options) -> bool:
    return o.grad_accum == 1


def _epoch_cosine(o: Options) -> bool:
    """The cosine schedule stepped once per epoch: without a warm-up."""
    return o.scheduler == "cosine" and not o.warmup_steps


def _warmup(o: Options) -> bool:
    return o.warmup_steps > 0


def _warmup_mutants() -> list:
    """With a warm-up, train.py hands the loop the schedule to step once per optimizer step:
    with cosine the whole schedule (`scheduler`), with plateau the warm-up beside it."""
    mutants = []
    for scheduler in ("cosine", "plateau"):
        name = "scheduler" if scheduler == "cosine" else "warmup"
        on = lambda o, s=scheduler: _warmup(o) and o.scheduler == s  # noqa: E731
        mutants += [
            Mutant(
                "R7",
                f"warm-up ({scheduler}) stepped once per epoch",
                "train.py",
                (
                    Edit(
                        "replace",
                        f"                schedule={name},  # R7: stepped after each "
                        "optimizer step\n",
                        "",
                    ),
                    Edit(
                        "replace",
                        "            improved = training.judge(",
                        f"            {name}.step()\n            improved = training.judge(",
                    ),
                ),
                on,
            ),
            Mutant(
                "R7",
                f"warm-up ({scheduler}) restarted on resume",
                "state.py",
                (Edit("delete", f'self.{name}.load_state_dict(checkpoint["{name}"])'),),
                on,
            ),
        ]
    return mutants


# train.py hands the checkpoints the plain module (C4, M5): a wrapper's state has prefixed keys.
_STATE_OF_MODEL = "    training = TrainingState(\n        model=model,"
_WINDOW_LOSS = "loss = task.loss(outputs, targets) * (len(targets) / samples)"
# The accumulating loop's scaler step, once per window.
_WINDOW_SCALER_STEP = (
    "        scaler.step(optimizer)  # R5: skips the update when the gradients overflowed\n"
    "        scaler.update()  # R14: once per optimizer step, not per batch\n"
)
_DDP_EXCHANGE_TESTS = (
    "tests/test_distributed.py::test_R14_ddp_exchanges_gradients_once_per_window",
)
_DDP_WINDOW_TESTS = (
    "tests/test_distributed.py::"
    "test_R14_an_accumulated_step_over_uneven_ranks_is_the_whole_window_step",
)


# The distributed rules' mutants run the tests of tests/test_distributed.py that catch them:
# the sharding checks (in-process), the exchanged gradient (one launch) and the 2-process run
# (one launch: equal ranks, their histories, the whole validation split, one process).
_SHARDING_TESTS = (
    "tests/test_distributed.py::test_M1_every_sample_once_per_epoch_and_a_new_order_each_epoch",
)
_WEIGHT_TESTS = (
    "tests/test_distributed.py::test_M2_the_exchanged_gradient_is_the_whole_batch_gradient",
)
_AGREEMENT_TESTS = (
    "tests/test_distributed.py::"
    "test_a_signal_to_one_rank_inside_an_epoch_stops_both_and_resumes_to_the_same_bits[agreeing]",
)
_LAUNCH_TESTS = ("tests/test_distributed.py::test_two_processes_end_where_one_process_ends",)
_TABULAR_OR_IMAGES = lambda o: o.distributed and o.task != "text-classification"  # noqa: E731
# Without BatchNorm, where 2 processes must end where 1 does (the image CNN has BatchNorm).
# (and in fp32: bf16's tolerance, 5e-2, would hide the unweighted average's ~1e-3)
_TABULAR_OR_TEXT = lambda o: (  # noqa: E731
    o.distributed and o.task != "image-classification" and not o.amp
)


MUTANTS = [
    Mutant("R1", "optimizer built before model.to(device)", "train.py",
           (Edit("move_after", "model.to(device)", "optimizer = build_optimizer(model, cfg)"),)),
    Mutant("R2", "zero_grad after backward", "engine.py",
           (Edit("move_after", "optimizer.zero_grad(", ".backward()"),)),
    Mutant("R2", "zero_grad never called", "engine.py", (Edit("delete", "optimizer.zero_grad("),)),
    Mutant("R3", "optimizer.step before backward", "engine.py",
           (Edit("move_before", "optimizer.step()", ".backward()"),), _fp32),
    Mutant("R3", "scaler.step before backward", "engine.py",
           (Edit("move_before", "scaler.step(optimizer)", ".backward()"),), _amp),
    Mutant("R4", "clipping before backward", "engine.py",
           (Edit("move_before", "clip_grad_norm_(", ".backward()"),), lambda o: o.clip),
    Mutant("R4", "clipping after optimizer.step", "engine.py",
           (Edit("move_after", "clip_grad_norm_(", "optimizer.step()"),),
           lambda o: o.clip and not o.amp),
    Mutant("R4", "clipping after scaler.step", "engine.py",
           (Edit("move_after", "clip_grad_norm_(", "scaler.step(optimizer)"),),
           lambda o: o.clip and o.amp),
    Mutant("R5", "clipping without unscale_", "engine.py",
           (Edit("delete", "scaler.unscale_(optimizer)"),), lambda o: o.clip and o.amp),
    Mutant("R5", "optimizer.step bypasses the scaler", "engine.py",
           (Edit("replace", "scaler.step(optimizer)", "optimizer.step()"),), _amp),
    Mutant("R5", "backward on the unscaled loss", "engine.py",
           (Edit("replace", "scaler.scale(loss).backward()", "loss.backward()"),), _amp),
    Mutant("R5", "scaler.update never called", "engine.py",
           (Edit("delete", "scaler.update()"),), _amp),
    Mutant("R6", "backward inside autocast", "engine.py",
           (Edit("replace", _LOSS + "\n        scaler", _LOSS + "\n            scaler"),),
           lambda o: o.amp and _per_batch(o)),
    Mutant("R6", "backward inside autocast", "engine.py",  # the line after the loss's
           (Edit("move_after", "scaler.scale(loss).backward()", _WINDOW_LOSS),),
           lambda o: o.amp and _accum(o)),
    Mutant("R6", "GradScaler on with bf16", "train.py",
           (Edit("replace", "enabled=amp_dtype == torch.float16", "enabled=True"),), _amp),
    Mutant("R7", "cosine scheduler stepped every batch", "train.py",
           (Edit("replace", _STEP, _PER_BATCH + _STEP),), _epoch_cosine),
    Mutant("R7", "cosine scheduler stepped before the epoch's updates", "train.py",
           (Edit("move_before", "scheduler.step()", "train = train_one_epoch("),), _epoch_cosine),
    # With a warm-up (warmup_steps above 0), caught by the R7 tests of test_contract_warmup.py.
    *_warmup_mutants(),
    Mutant("R7", "warm-up and cosine lengths counted in batches, not optimizer steps",
           "train.py",
           (Edit("replace", "build_scheduler(optimizer, cfg, steps_per_epoch)",
                 "build_scheduler(optimizer, cfg, len(train_batches))"),),
           lambda o: _warmup(o) and _accum(o) and o.scheduler == "cosine"),
    Mutant("R7", "warm-up stepped every batch of a window", "engine.py",
           (Edit("replace", "        if schedule is not None:\n            schedule.step()  # R7: "
                 "once per window's optimizer step, after it: the next rate\n", ""),
            Edit("replace", "            window_loss = window_loss + loss.detach()",
                 "            if schedule is not None:\n                schedule.step()\n"
                 "            window_loss = window_loss + loss.detach()")),
           lambda o: _warmup(o) and _accum(o)),
    Mutant("R8", "plateau step without the metric", "train.py",
           (Edit("replace", 'scheduler.step(val["loss"])', "scheduler.step()"),),
           lambda o: o.scheduler == "plateau"),
    Mutant("R8", "plateau stepped with the training loss", "train.py",
           (Edit("replace", 'scheduler.step(val["loss"])', 'scheduler.step(train["loss"])'),),
           lambda o: o.scheduler == "plateau"),
    Mutant("R8", "plateau mode max for a loss", "optim.py",
           (Edit("replace", 'mode="min"', 'mode="max"'),), lambda o: o.scheduler == "plateau"),
    # With EMA, validation runs on the average's own copy (always in eval mode): the trained
    # model never leaves training mode during a run, so this deletion changes nothing there.
    Mutant("R9", "model.train never called", "engine.py", (Edit("delete", "model.train()"),),
           lambda o: not o.ema),
    Mutant("R10", "validation without no_grad", "engine.py",
           (Edit("delete", "@torch.no_grad()"),)),
    Mutant("R10", "validation without model.eval", "engine.py", (Edit("delete", "model.eval()"),)),
    Mutant("R11", "loss tensor kept with its graph", "engine.py",
           (Edit("replace", "losses.append(loss.detach())", "losses.append(loss)"),), _per_batch),
    Mutant("R11", "loss tensor kept with its graph", "engine.py",
           (Edit("replace", "window_loss = window_loss + loss.detach()",
                 "window_loss = window_loss + loss"),), _accum),
    Mutant("R12", "training loss averaged per batch", "engine.py",
           (Edit("replace", "(per_step * weights).sum().item() / sum(sizes)",
                 "per_step.mean().item()"),), _one),
    Mutant("R12", "training loss averaged per batch", "engine.py",
           (Edit("replace", "torch.stack([(per_step * weights).sum(), weights.sum()])",
                 "torch.stack([per_step.sum(), torch.ones_like(weights).sum()])"),), _ddp),
    Mutant("R12", "validation metrics averaged per batch", "progress.py",
           (Edit("replace", 'stats["loss"] = loss.detach() * n', 'stats["loss"] = loss.detach()'),
            Edit("replace", "self.count += n", "self.count += 1"))),
    Mutant("R13", "last weights kept instead of the best", "train.py",
           (Edit("delete", ".load_state_dict(training.best_weights)"),),
           lambda o: o.early_stopping),
    # Gradient accumulation (grad_accum > 1), caught by the R14 tests of
    # tests/test_contract_accumulation.py (and of tests/test_distributed.py for DDP's exchange).
    Mutant("R14", "loss not weighted by the batch's share of the window", "engine.py",
           (Edit("replace", " * (len(targets) / samples)", ""),), _accum),
    Mutant("R14", "loss divided by k (wrong for a shorter window or a smaller batch)",
           "engine.py",
           (Edit("replace", "(len(targets) / samples)", "(1 / grad_accum)"),), _accum),
    Mutant("R14", "zero_grad every batch", "engine.py",
           (Edit("move_before", "optimizer.zero_grad(", _WINDOW_LOSS),), _accum),
    Mutant("R14", "optimizer step every batch", "engine.py",
           (Edit("move_after", "optimizer.step()", "window_loss = window_loss +"),),
           lambda o: _accum(o) and not o.amp),
    Mutant("R14", "optimizer step every batch", "engine.py",
           (Edit("move_after", "scaler.step(optimizer)", "window_loss = window_loss +"),),
           lambda o: _accum(o) and o.amp),
    # The usual hand-written loop, `if (i + 1) % k == 0: step, zero_grad`, without the flush at
    # the end of the epoch: the shorter last window never steps, and its gradients are added
    # to the next epoch's first window.
    Mutant("R14", "leftover gradients carried into the next epoch", "engine.py",
           (Edit("delete", "optimizer.zero_grad("),
            Edit("replace", "        optimizer.step()  # R3: update with this window's gradients",
                 "        if len(window) == grad_accum:\n"
                 "            optimizer.step()\n"
                 "            optimizer.zero_grad(set_to_none=True)")),
           lambda o: _accum(o) and not o.amp),
    Mutant("R14", "leftover gradients carried into the next epoch", "engine.py",
           (Edit("delete", "optimizer.zero_grad("),
            Edit("replace", "        scaler.step(optimizer)  # R5: skips the update when the "
                 "gradients overflowed\n        scaler.update()  # R14: once per optimizer step, "
                 "not per batch",
                 "        if len(window) == grad_accum:\n"
                 "            scaler.step(optimizer)\n"
                 "            scaler.update()\n"
                 "            optimizer.zero_grad(set_to_none=True)")),
           lambda o: _accum(o) and o.amp),
    Mutant("R14", "DDP all-reduce on every batch (no no_sync)", "engine.py",
           (Edit("replace", "with contextlib.nullcontext() if last else no_sync():",
                 "with contextlib.nullcontext():"),),
           lambda o: _accum(o) and o.distributed, _DDP_EXCHANGE_TESTS),
    # Without BatchNorm, where one process can compute the window's step (the image CNN has it).
    Mutant("R14", "DDP exchange weighted by the last batch's samples, not the window's",
           "distributed.py",
           (Edit("replace", "self.last += len(inputs[0])", "self.last = len(inputs[0])"),),
           lambda o: _accum(o) and o.distributed and o.task != "image-classification",
           _DDP_WINDOW_TESTS),
    Mutant("S1", "nothing seeded", "train.py",
           (Edit("delete", "seed_everything(cfg.seed, cfg.deterministic)"),)),
    # The EMA of the weights (--ema), caught by the contract tests E1-E3.
    Mutant("E1", "EMA updated before the optimizer step", "engine.py",
           (Edit("replace", _OPT_STEP + _EMA_UPDATE, _EMA_UPDATE + _OPT_STEP),),
           lambda o: o.ema and not o.amp and _per_batch(o)),
    # In the accumulating loop the EMA's order is mutated on the AMP variant below: the covering
    # set has EMA with accumulation only with AMP (reg-plateau-amp-clip-es-ddp-ema-ga3-wu4).
    Mutant("E1", "EMA updated before the scaler's step", "engine.py",
           (Edit("replace", _SCALER_STEP, ""),
            Edit("replace", _EMA_CALL, _EMA_CALL + _SCALER_STEP)),
           lambda o: o.ema and o.amp and _per_batch(o)),
    Mutant("E1", "EMA updated before the scaler's step", "engine.py",
           (Edit("replace", _WINDOW_SCALER_STEP, ""),
            Edit("replace", _EMA_CALL, _EMA_CALL + _WINDOW_SCALER_STEP)),
           lambda o: o.ema and o.amp and _accum(o)),
    # A user's `ema.update()` in the batch loop: with windows, the average takes in each
    # batch's half-built state k times a step (E1's test runs the project's own windows). On
    # the AMP variant only, as above: the covering set has no fp32 EMA with accumulation.
    Mutant("E1", "EMA updated on every batch of a window", "engine.py",
           (Edit("replace", _WINDOW_SUM, _WINDOW_SUM + _EMA_EVERY_BATCH),
            Edit("replace", _WINDOW_EMA_AMP, "")),
           lambda o: o.ema and o.amp and _accum(o)),
    Mutant("E1", "EMA updated on the steps the scaler skipped", "engine.py",
           (Edit("replace", "not scaler.is_enabled() or applied_updates(optimizer) > ema.updates",
                 "True"),), lambda o: o.ema and o.amp),
    Mutant("E2", "validation on the trained weights, not their average", "train.py",
           (Edit("replace", "evaluate(ema.module, val_batches", "evaluate(model, val_batches"),),
           lambda o: o.ema and not o.compile),
    Mutant("E2", "validation on the trained weights, not their average", "train.py",
           (Edit("replace", "evaluate(compiled_ema, val_batches",
                 "evaluate(compiled, val_batches"),),
           lambda o: o.ema and o.compile),
    Mutant("E2", "predict loads the trained weights, not their average", "predict.py",
           (Edit("replace", 'self.model.load_state_dict(checkpoint["ema"]["weights"])',
                 'self.model.load_state_dict(checkpoint["model"])'),), _ema),
    Mutant("E3", "EMA state missing from the checkpoint", "state.py",
           (Edit("delete", '"ema": self.ema.state_dict(),'),
            Edit("delete", 'self.ema.load_state_dict(checkpoint["ema"])')),
           lambda o: o.ema and not o.early_stopping),
    Mutant("E3", "EMA state missing from the checkpoint", "state.py",
           (Edit("delete", '"ema": self.ema.state_dict(),'),
            Edit("delete", 'self.ema.load_state_dict(checkpoint["ema"])'),
            Edit("replace", 'best["ema"]["weights"] if best', 'best["model"] if best')),
           lambda o: o.ema and o.early_stopping),
    # Mid-epoch checkpoints (C5), caught by tests/test_midepoch.py.
    Mutant("C5", "the used batches trained again on a mid-epoch resume", "seed.py",
           (Edit("replace", "        return batches[used:]", "        return batches"),),
           _c5, _MIDEPOCH_TESTS),
    Mutant("C5", "the epoch's order drawn from the generator's mid-epoch state", "seed.py",
           (Edit("replace", "self.generator.set_state(epoch_state)",
                 "self.generator.set_state(state)"),),
           _c5, _MIDEPOCH_TESTS),
    Mutant("C5", "the epoch's losses so far dropped on resume", "progress.py",
           (Edit("replace", 'self.losses = list(state["losses"].to(device).unbind())',
                 "self.losses = []"),
            Edit("replace", 'self.sizes, self.batches = list(state["sizes"]), state["batches"]',
                 'self.sizes, self.batches = [], state["batches"]')),
           _c5, _MIDEPOCH_TESTS),
    Mutant("C5", "SIGTERM stops at once instead of after saving its step", "ending.py",
           (Edit("replace", "STOP.deferring = True", "STOP.deferring = False"),),
           _c5, _MIDEPOCH_TESTS),
    # The agreement's code is the same in every torchrun render: one shows that the test sees it.
    Mutant("M8", "a rank stops on a signal that came while the ranks agreed", "midepoch.py",
           (Edit("replace", "stopping = bool(signum)",
                 "stopping = bool(signum) or STOP.signum is not None"),
            Edit("replace", "STOP.signum = int(signum)",
                 "STOP.signum = int(signum) or STOP.signum")),
           lambda o: o.distributed and _c5(o) and not o.amp, _AGREEMENT_TESTS),
    # torch.compile (--compile), caught by tests/test_compile.py.
    Mutant("C4", "the compiled module's state saved (_orig_mod. keys)", "train.py",
           (Edit("replace", _STATE_OF_MODEL, _STATE_OF_MODEL.replace("model,", "compiled,")),),
           _compile, _COMPILE_TESTS),
    Mutant("C4", "a checkpoint loaded into the compiled module with strict=False", "state.py",
           (Edit("replace", 'self.model.load_state_dict(checkpoint["model"])',
                 'torch.compile(self.model).load_state_dict(checkpoint["model"], strict=False)'),),
           _compile, _COMPILE_TESTS),
    Mutant("K1", "a second model compiled, not the one the optimizer steps", "train.py",
           (Edit("replace", _COMPILED, _COMPILED.replace(
               "compile_model(model)", "compile_model(build_model(cfg, data.input_shape, "
               "data.task.output_dim).to(device))")),),
           _compile, _COMPILE_TESTS),
    Mutant("K1", "validation on a compiled snapshot of the first average", "train.py",
           (Edit("replace", "compile_model(ema.module)",
                 "compile_model(WeightAverage(model, cfg.ema_decay).module)"),),
           lambda o: o.compile and o.ema, _COMPILE_TESTS),
    Mutant("K1", "dropout drawn by the compiled code's own generator", "compiling.py",
           (Edit("delete", "torch._inductor.config.fallback_random = True"),),
           _compile, _COMPILE_TESTS),
    Mutant("K2", "text batches padded to each batch's own longest document", "data.py",
           (Edit("replace", "torch.arange(padded_length(int(lengths.max()), self.longest))",
                 "torch.arange(int(lengths.max()))"),),
           lambda o: o.compile and o.task == "text-classification", _DATA_TESTS + _COMPILE_TESTS),
    # The image task's data rules, caught by its own tests/test_data.py.
    Mutant("D2", "small last training batch kept (BatchNorm)", "data.py",
           (Edit("replace", "if len(batches) > 1 and len(batches[-1]) < self.batch_size:",
                 "if False:"),), _images, _DATA_TESTS),
    Mutant("D5", "validation batches augmented", "data.py",
           (Edit("replace", "(split.crop_padding, split.flip) if shuffle else (0, False)",
                 "(split.crop_padding, split.flip)"),
            Edit("replace", "            if self.shuffle:\n                images = crop_and_flip",
                 "            if True:\n                images = crop_and_flip")),
           _images, _DATA_TESTS),
    Mutant("D6", "normalisation statistics taken with the validation images", "data.py",
           (Edit("replace", "    mean, std = channel_stats(images)  # training images only",
                 "    mean, std = channel_stats(torch.cat([images, val[0]]))  #"),),
           _images, _DATA_TESTS),
    # S2 in the streamed path's DataLoader workers, caught by tests/test_streaming.py. (Leaving
    # out worker_init_fn is not a bug torch >= 1.9 lets through: it seeds NumPy and random in
    # each worker itself; these are the mistakes that do survive.)
    Mutant("S2", "every worker seeded alike", "streaming.py",
           (Edit("replace", "    seed = torch.initial_seed() % 2**32", "    seed = 0"),),
           _images, _STREAMING_TESTS),
    Mutant("S2", "worker seeds fixed instead of drawn from the run's seed", "streaming.py",
           (Edit("replace", "manual_seed(int(batches.generator.initial_seed()) + 1)",
                 "manual_seed(1)"),),
           _images, _STREAMING_TESTS),
    # The distributed rules (torchrun), caught by tests/test_distributed.py.
    Mutant("M1", "the same batch order every epoch (no set_epoch)", "data.py",
           (Edit("replace", "torch.randperm(n, generator=self.generator) if draw",
                 "torch.randperm(n, generator=torch.Generator().manual_seed(0)) if draw"),),
           _TABULAR_OR_IMAGES, _SHARDING_TESTS),
    Mutant("M1", "the same batch order every epoch (no set_epoch)", "data.py",
           (Edit("replace", "order = torch.randperm(len(self.lengths), generator=self.generator)",
                 "order = torch.randperm(len(self.lengths), "
                 "generator=torch.Generator().manual_seed(0))"),),
           lambda o: o.distributed and o.task == "text-classification", _SHARDING_TESTS),
    Mutant("M1", "uneven shards padded by repeating samples", "distributed.py",
           (Edit("replace", "    return [index[ctx.rank :: ctx.world_size] for index in batches]",
                 "    return [torch.cat([index, index[: -len(index) % ctx.world_size]])"
                 "[ctx.rank :: ctx.world_size] for index in batches]"),),
           _ddp, _SHARDING_TESTS),
    Mutant("M2", "DDP's plain average of the ranks' gradients (parts of unequal size)",
           "distributed.py",
           (Edit("replace", "[gradients * count.last, gradients.new_tensor([count.last])]",
                 "[gradients, gradients.new_tensor([1.0])]"),), _ddp, _WEIGHT_TESTS),
    Mutant("M2", "the sample-weighted exchange never installed", "distributed.py",
           (Edit("delete", "    average_by_samples(trainer)  # M2"),), _TABULAR_OR_TEXT,
           _LAUNCH_TESTS),
    Mutant("M3", "validation padded by repeating samples (DistributedSampler)", "distributed.py",
           (Edit("replace", "    return order[ctx.rank :: ctx.world_size]",
                 "    return torch.cat([order, order[: -len(order) % ctx.world_size]])"
                 "[ctx.rank :: ctx.world_size]"),), _ddp, _SHARDING_TESTS),
    Mutant("M3", "validation metrics not summed over ranks", "progress.py",
           (Edit("replace", "values = sum_over_ranks(torch.stack([*sums, count])).tolist()",
                 "values = torch.stack([*sums, count]).tolist()"),), _ddp, _LAUNCH_TESTS),
    Mutant("M4", "decisions on each rank's own validation loss", "progress.py",
           (Edit("replace", 'metrics = {"loss": totals.pop("loss") / count}',
                 'totals.pop("loss")\n'
                 '        metrics = {"loss": self.totals["loss"].item() / self.count}'),),
           _ddp, _LAUNCH_TESTS),
    Mutant("M5", "every rank writes the checkpoints", "train.py",
           (Edit("replace", "if ctx.is_main:  # M5: rank 0 alone writes;",
                 "if True:  # M5: rank 0 alone writes;"),), _ddp, _LAUNCH_TESTS),
    Mutant("M5", "the DDP wrapper's state saved (module. prefix)", "train.py",
           (Edit("replace", _STATE_OF_MODEL, _STATE_OF_MODEL.replace("model,", "trainer,")),),
           _ddp, _LAUNCH_TESTS),
    Mutant("M5", "no barrier before the checkpoints are read", "train.py",
           (Edit("delete", "    distributed.barrier()"),), _ddp, _LAUNCH_TESTS),
    # The text task's rules, caught by its own tests/test_data.py.
    Mutant("T1", "vocabulary built from training and validation documents", "data.py",
           (Edit("replace", "Vocabulary.build(texts, cfg.vocab_size",
                 "Vocabulary.build(texts + val[0], cfg.vocab_size"),), _text, _DATA_TESTS),
    Mutant("T2", "padding counted in the mean pooling", "model.py",
           (Edit("replace", "return (features * weights).sum(dim=1) / weights.sum(dim=1)",
                 "return features.mean(dim=1)"),), _text, _DATA_TESTS),
    Mutant("T3", "padding not masked out of the max pooling", "model.py",
           (Edit("replace", 'features.masked_fill(~mask.unsqueeze(-1), float("-inf")).amax(dim=1)',
                 "features.amax(dim=1)"),), _text, _DATA_TESTS),
    Mutant("T3", "the <pad> embedding is a learnt vector, not zero", "model.py",
           (Edit("replace", "nn.Embedding(vocab_size, embedding_dim, padding_idx=PAD)",
                 "nn.Embedding(vocab_size, embedding_dim)"),), _text, _DATA_TESTS),
]  # fmt: skip

# A Jinja tag that reads the compile option, in a template file's name or text.
_READS_COMPILE = re.compile(r"\{[%{][^%}]*\bcompile\b[^%}]*[%}]\}")
_TEMPLATE_PACKAGE = Path(__file__).resolve().parents[1] / "template" / "src" / "{{package_name}}"


@functools.cache
def _compile_shapes(module: str, options: Options) -> bool:
    """Whether the compile option changes the text of `module` as these options render it."""
    for path in _TEMPLATE_PACKAGE.iterdir():
        name = jinja2.Template(path.name).render(asdict(options)).removesuffix(".jinja")
        if name == module:
            return bool(_READS_COMPILE.search(path.name) or _READS_COMPILE.search(path.read_text()))
    return False


def needed(options: Options, applies: Callable[[Options], bool], module: str) -> bool:
    """Whether a case (a mutant, or a rewrite, of `module`) runs on this combination.

    A case that applies without compile too, on a compile combination whose `module` reads
    the same as without compile, would run the very code the same task's other combinations
    run (the loop tests train eager; only tests/test_compile.py compiles): it runs there only,
    so that compile adds the cases it changes, not a second copy of every case."""
    if not applies(options):
        return False
    if not options.compile:
        return True
    return _compile_shapes(module, options) or not applies(replace(options, compile=False))


AS_WITHOUT_COMPILE = "as without compile"  # a table cell for a case needed() leaves out


# A pairwise covering set of the option combinations, chosen by code (tests/conftest.py): every
# pair of values of any two options (each task, scheduler, AMP, clipping, early stopping) meets
# in some combination, so each rule meets each option that changes how it is written. The
# numbers are the defaults the mutants were written against (max_grad_norm 1.0, seed 42).
COVERING = [Options(**{name: getattr(o, name) for name in FACTORS}) for o in covering_set()]

# Every mutant on every combination of the covering set it applies to: the proof tier's cases.
CASES = [(o, m) for o in COVERING for m in MUTANTS if needed(o, m.applies, m.file)]


def case_key(options: Options, mutant: "Mutant") -> str:
    from tests.conftest import combo_id

    return f"{combo_id(options)}:{mutant.slug}"


RULE_TAG = forkrun.RULE_TAG  # a failure names a rule as "R7:" (or "R7/", "R7,")


@dataclass
class Outcome:
    mutant: Mutant
    combo: str
    runs: bool  # imports, and its test suite ran to the end with failures, not errors
    caught_by: list[str]  # tests whose failure names the mutant's rule
    failed: list[str]  # every failing test
    detail: str = ""

    @property
    def caught(self) -> bool:
        return self.runs and bool(self.caught_by)

    def record(self) -> dict:
        """What the table needs, as JSON (the mutant by its place in MUTANTS)."""
        fields = ("combo", "runs", "caught_by", "failed", "detail")
        return {"mutant": MUTANTS.index(self.mutant), **{f: getattr(self, f) for f in fields}}

    @classmethod
    def from_record(cls, record: dict) -> "Outcome":
        fields = ("combo", "runs", "caught_by", "failed", "detail")
        return cls(MUTANTS[record["mutant"]], *(record[f] for f in fields))


def _failures(report: Path) -> dict[str, str]:
    """Failing test name -> its failure message (not the traceback, whose source lines
    quote the rule comments), from pytest's JUnit XML."""
    failures = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        for problem in list(case.iter("failure")) + list(case.iter("error")):
            failures[case.get("name")] = problem.get("message", "")
    return failures


# The generated test files an edited copy runs: those whose failures name a loop rule. Only
# they can catch a mutant (RULE_TAG), and the correct rewrites of tests/equivalents.py must pass
# them. The others name no rule, so they could never count as catching one, yet took most of
# each run's time: the input probes and Ctrl-C/SIGKILL subprocesses (a broken loop runs them to
# their timeouts), and test_training.py and test_overfit.py (runs of 10-20 epochs, long on the
# image and text tasks). An equivalent's training is checked more strictly than they would: its
# weights must equal the generated code's (tests/equivalents.py, training_fingerprint).
LOOP_TESTS = (
    "tests/test_contract.py",
    "tests/test_contract_epochs.py",
    "tests/test_contract_ema.py",  # --ema only
    "tests/test_contract_accumulation.py",  # grad_accum > 1 only
    "tests/test_contract_warmup.py",  # warmup_steps > 0 only
    "tests/test_reproducibility.py",
)


@dataclass
class LoopRun:
    """What one edited copy of a project did under its loop tests."""

    finished: bool  # imported, and its loop tests ran to the end (passing or failing)
    returncode: int | None
    failures: dict[str, str]  # failing test name -> its failure message
    detail: str = ""  # why it did not finish


def run_edited(
    project: Path,
    package: str,
    file: str,
    edits: Iterable[Edit],
    work: Path,
    tests: tuple[str, ...] = (),
    loop_tests: bool = True,
    rule: str | None = None,
    stop_at_first: bool = False,
    isolation: str = "fork",
) -> LoopRun:
    """Copy the project, apply `edits` to one module of its package, run the copy's loop tests.

    With `rule`, the tests that name it run first and the run ends at the first failure that
    names it (a mutant needs one); with `stop_at_first`, at any failure (an equivalent must have
    none). `isolation="fork"` runs them in a child of a process that has torch imported
    (tests/forkrun.py); "subprocess" in two fresh interpreters, every test, as before: the
    runner's own benchmark compares the two (benchmarks/mutation_speed.py)."""
    edited = work / project.name
    shutil.copytree(project, edited, ignore=shutil.ignore_patterns("run", "__pycache__"))
    for edit in edits:
        apply_edit(edited / "src" / package / file, edit)
    loop = [path for path in LOOP_TESTS if (edited / path).is_file()]  # some need an option
    selected = [*(loop if loop_tests else ()), *tests]
    if isolation == "subprocess":
        return _run_in_subprocesses(edited, package, selected)
    result = forkrun.POOL.run(
        {
            "kind": "tests",
            "cwd": str(edited),
            "env": {"PYTHONPATH": "src"},
            "sys_path": ["src"],
            "imports": [f"{package}.train", f"{package}.overfit"],
            "tests": selected,
            "rule": rule,
            "stop_at_first": stop_at_first,
            "log": str(work / "tests.log"),
            "timeout": 600,
        }
    )
    if result.get("timed_out"):
        return LoopRun(False, None, {}, "timed out after 600 s")
    if "crashed" in result:
        return LoopRun(False, None, {}, result["crashed"])
    if not result["imports"]:
        return LoopRun(False, None, {}, result["detail"])
    if result["returncode"] not in (0, 1):
        return LoopRun(False, result["returncode"], {}, result.get("output", "")[-2000:])
    return LoopRun(True, result["returncode"], result["failures"])


def _run_in_subprocesses(edited: Path, package: str, selected: list[str]) -> LoopRun:
    env = {**_env(), "PYTHONPATH": "src"}
    imports = subprocess.run(
        [sys.executable, "-c", f"import {package}.train, {package}.overfit"],
        cwd=edited, env=env, capture_output=True, text=True,
    )  # fmt: skip
    if imports.returncode != 0:
        return LoopRun(False, None, {}, imports.stderr.strip()[-500:])
    report = edited / "report.xml"
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}",
         "-m", "probe or not probe", *selected],
        cwd=edited, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    if tests.returncode not in (0, 1) or not report.exists():
        return LoopRun(False, tests.returncode, {}, tests.stdout[-1500:] + tests.stderr[-500:])
    return LoopRun(True, tests.returncode, _failures(report))


def run_mutant(
    project: Path,
    package: str,
    mutant: Mutant,
    combo: str,
    work: Path,
    isolation: str = "fork",
) -> Outcome:
    """Copy the project, inject the bug, run the copy's own tests, and say what caught it (with
    the fork runner: the first test that did; with subprocesses: every one)."""
    # The distributed rules (M) are seen only by the distributed tests, which launch several
    # processes: the loop tests run one process and would only add their minutes.
    loop_tests = not mutant.rule.startswith("M")
    rule = mutant.rule if isolation == "fork" else None
    run = run_edited(
        project, package, mutant.file, mutant.edits, work, mutant.tests, loop_tests, rule,
        isolation=isolation,
    )  # fmt: skip
    if not run.finished:
        return Outcome(mutant, combo, False, [], [], run.detail)
    caught_by = [
        name for name, message in run.failures.items() if mutant.rule in RULE_TAG.findall(message)
    ]
    return Outcome(mutant, combo, run.returncode == 1, sorted(caught_by), sorted(run.failures))


def _env() -> dict:
    # Several mutants run at once on few cores; more torch threads than cores makes them spin.
    return {**os.environ, "OMP_NUM_THREADS": "1"}


def _label(names: list[str]) -> str:
    """Test names, short: contract tests by their rules, parametrised runs merged."""
    runs: dict[str, list[str]] = {}
    for name in names:
        base, _, param = name.removeprefix("test_").partition("[")
        rules = re.match(r"((?:[RSEKC]\d+_)+)", base)
        label = "contract " + rules.group(1).rstrip("_") if rules else base
        runs.setdefault(label, []).extend([param.rstrip("]")] if param else [])
    return "<br>".join(f"{k} ({', '.join(v)})" if v else k for k, v in runs.items())


def table(outcomes: list[Outcome]) -> str:
    """Markdown: one row per bug, one column per combination, the catching tests in each cell."""
    combos = list(dict.fromkeys(o.combo for o in outcomes))
    cells: dict[str, dict[str, str]] = {}
    for o in outcomes:
        key = f"{o.mutant.rule} | {o.mutant.bug}"
        missed = "**NOT CAUGHT**" if o.runs else "**did not run**"
        cells.setdefault(key, {})[o.combo] = _label(o.caught_by) if o.caught else missed
    caught = sum(o.caught for o in outcomes)
    lines = [
        f"{caught} of {len(outcomes)} mutants caught, each by a test whose failure names the rule.",
        "",
        "| rule | bug injected | " + " | ".join(f"`{c}`" for c in combos) + " |",
        "|---|---|" + "---|" * len(combos),
    ]
    order = [f"{m.rule} | {m.bug}" for m in MUTANTS]
    for key, row in sorted(cells.items(), key=lambda item: order.index(item[0])):
        # A row is every mutant of that rule and bug (one per kind of combination it fits).
        alike = [m for m in MUTANTS if f"{m.rule} | {m.bug}" == key]
        lines.append(
            f"| {key} | " + " | ".join(row.get(c) or _absent(c, alike) for c in combos) + " |"
        )
    return "\n".join(lines) + "\n"


def _absent(combo: str, alike: list["Mutant"]) -> str:
    """The cell of a row's combination on which none of its mutants ran."""
    cells = {absent_cell(combo, m.applies, m.file) for m in alike}
    return AS_WITHOUT_COMPILE if AS_WITHOUT_COMPILE in cells else "n/a"


def absent_cell(combo: str, applies: Callable[[Options], bool], module: str) -> str:
    """The cell of a case that did not run: left to the combinations without compile, or n/a."""
    from tests.conftest import COMBOS, combo_id

    options = next((o for o in [*COVERING, *COMBOS] if combo_id(o) == combo), None)
    if options is not None and applies(options) and not needed(options, applies, module):
        return AS_WITHOUT_COMPILE
    return "n/a"


def write_table(outcomes: list[Outcome], path: Path = tables.MUTATION_TABLE) -> None:
    about = (
        "Each row is a silent training-loop bug injected into a rendered project; each cell "
        "names the\ngenerated test that caught it: the first whose failure names the rule (the "
        "tests that name it\nin their source run first, and the run stops there). The proof "
        "tier (`python -m pytest -n 2\n--proof`) rewrites this file when it runs every mutant; "
        "`python -m tests.mutants --out\ndocs/mutation-table.md` does the same outside pytest."
    )
    combos = list(dict.fromkeys(o.combo for o in outcomes))
    tables.write(path, "Mutation table", about, table(outcomes), combos)


def write_recorded_table() -> bool:
    """Write the table from the proof tier's records, if every case has one."""
    records = tables.every_record("mutants", [case_key(o, m) for o, m in CASES])
    if records is not None:
        write_table([Outcome.from_record(r) for r in records])
    return records is not None


def main(argv: list[str] | None = None) -> int:
    from tests.conftest import COMBOS, combo_id, render

    parser = argparse.ArgumentParser(prog="python -m tests.mutants", description=__doc__)
    parser.add_argument(
        "--all", action="store_true", help="every combination, not the covering set"
    )
    parser.add_argument("--out", type=Path, help="also write the markdown table here")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument(
        "--rule", action="append", default=[], metavar="RULE",
        help="only the mutants of this rule, e.g. --rule K1 (repeatable)",
    )  # fmt: skip
    parser.add_argument(
        "--bug", metavar="TEXT", help="only the mutants whose bug or slug contains TEXT"
    )
    parser.add_argument(
        "--combo", action="append", default=[], metavar="ID",
        help="only the combinations whose id is ID, or matches it as a regular expression "
        "(repeatable), e.g. --combo 'tc$'",
    )  # fmt: skip
    parser.add_argument(
        "--list", action="store_true", help="list the cases the filters select, and run nothing"
    )
    args = parser.parse_args(argv)

    def chosen(mutant: Mutant) -> bool:
        if args.rule and mutant.rule not in args.rule:
            return False
        return not args.bug or args.bug in mutant.bug or args.bug in mutant.slug

    combos = [
        o for o in (COMBOS if args.all else COVERING)
        if not args.combo or any(re.fullmatch(c, combo_id(o)) or re.search(c, combo_id(o))
                                 for c in args.combo)
    ]  # fmt: skip
    if args.list:
        for options in combos:
            for mutant in MUTANTS:
                if needed(options, mutant.applies, mutant.file) and chosen(mutant):
                    print(f"{combo_id(options)}: {mutant.rule} {mutant.bug}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        jobs = []
        for options in combos:
            combo = combo_id(options)
            project = render(Path(tmp) / "projects" / f"mut-{combo}", options).dest
            package = project.name.replace("-", "_")
            for mutant in MUTANTS:
                if needed(options, mutant.applies, mutant.file) and chosen(mutant):
                    work = Path(tmp) / "work" / f"{combo}-{mutant.slug}"
                    jobs.append((project, package, mutant, combo, work))
        with ThreadPoolExecutor(args.jobs) as pool:
            outcomes = list(pool.map(lambda job: run_mutant(*job), jobs))
    text = table(outcomes)
    print(text)
    if args.out:
        write_table(outcomes, args.out)
    return 0 if all(o.caught for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
