"""Correct rewrites of the generated training loop, as edits on a rendered project, and a runner.

`python -m tests.equivalents [--out docs/equivalents-table.md]` renders the covering set,
applies every rewrite that fits each render, runs each copy's loop tests and prints (and
writes) the table of which rewrites pass. Each rewrite trains exactly as the generated code
does, so a failing test here is a test that judges the style of the loop, not what it does:
the mutation suite (tests/mutants.py) shows that the tests catch bugs, this one that they
accept correct code. tests/test_equivalents.py runs the same rewrites under pytest.
"""

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

from scaffold.options import Options
from tests import forkrun, tables
from tests.mutants import COVERING, Edit, absent_cell, needed, run_edited


def _always(options: Options) -> bool:
    return True


def _amp(o: Options) -> bool:
    return o.amp


def _clip(o: Options) -> bool:
    return o.clip


def _accumulating(o: Options) -> bool:
    return o.grad_accum > 1


@dataclass(frozen=True)
class Equivalent:
    rewrite: str  # what the user changed, in a few words
    file: str  # a module of the generated package
    # The edits, or a function of the options for rewrites whose text depends on them.
    edits: tuple[Edit, ...] | Callable[[Options], tuple[Edit, ...]]
    applies: Callable[[Options], bool] = field(default=_always)
    tests: tuple[str, ...] = ()  # generated test files to run besides the loop tests

    def edits_for(self, options: Options) -> tuple[Edit, ...]:
        return self.edits(options) if callable(self.edits) else self.edits

    @property
    def slug(self) -> str:
        return re.sub(r"[^a-z0-9]+", "-", self.rewrite.lower()).strip("-")


# Lines of the generated engine.py, as rendered (long ones split to fit this file).
_ZERO = "optimizer.zero_grad(set_to_none=True)"
_ZERO_LINE = f"        {_ZERO}  # R2: drop the last step's gradients before backward\n"
_TRAIN_LOOP = "    for inputs, targets in batches:\n        optimizer.zero_grad("
_CLIP_CALL = "torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)"
_FP32_UPDATE = "        optimizer.step()  # R3: update with this batch's gradients\n"
_AMP_UPDATE = (
    "        scaler.step(optimizer)  # R5: skips the update when the gradients overflowed\n"
    "        scaler.update()\n"
)
_AMP_BACKWARD = (
    "        scaler.scale(loss).backward()  # R5: fp16 loss scaled up so small gradients survive\n"
)
_UNSCALE = (
    "        scaler.unscale_(optimizer)  # R5: clip the true gradients, not the scaled ones\n"
)
_CHECK = (
    "        if len(losses) % CHECK_EVERY == 0 and not torch.isfinite(losses[-1]):\n"
    "            break\n"
)
_EPOCH_MEAN = """\
    weights = torch.tensor(sizes, dtype=torch.float64, device=losses[0].device)
    per_step = torch.stack(losses).double()
    mean_loss = (per_step * weights).sum().item() / sum(sizes)
    if not math.isfinite(mean_loss):  # one read per epoch; the first bad step only on failure
        step = int(torch.isfinite(per_step).logical_not().nonzero()[0])
        raise NonFiniteLoss("training", per_step[step].item(), step + 1)
"""
_BEFORE_TRAIN_ONE_EPOCH = "\n\n\ndef train_one_epoch("

# The rewrites' own code.
_EPOCH_MEAN_OF_FLOATS = """\
    mean_loss = sum(value * n for value, n in zip(losses, sizes)) / sum(sizes)
    if not math.isfinite(mean_loss):
        step = next(i for i, value in enumerate(losses) if not math.isfinite(value))
        raise NonFiniteLoss("training", losses[step], step + 1)
"""
_RUNNING_SUM = """\
        value = loss.item()  # R11: a float, so no graph is kept
        steps += 1
        if not math.isfinite(value):
            raise NonFiniteLoss("training", value, steps)
        total += value * len(targets)
        count += len(targets)
"""
_WINDOWS = """\
    window = []
    for batch in batches:
        window.append(batch)
        if len(window) == size:
            yield window
            window = []
    if window:  # R14: the end of the epoch flushes a last, shorter window
        yield window
"""
_WINDOWS_BY_ISLICE = """\
    batches = iter(batches)
    while window := list(itertools.islice(batches, size)):  # R14: the last one may be shorter
        yield window
"""
_AFTER_WINDOW_UPDATE = "        # R11: read from the device once per CHECK_EVERY optimizer steps.\n"
_CLIP_HELPER = '''


def clip(model: nn.Module, max_norm: float) -> None:
    """Rescale the gradients so that their total norm is at most max_norm."""
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)'''


def _update(o: Options) -> str:
    return _AMP_UPDATE if o.amp else _FP32_UPDATE


def _step_body(o: Options) -> str:
    """The generated training step, from zero_grad to the update, exactly as rendered."""
    text = _ZERO_LINE
    if o.amp:
        text += (
            "        # R6: autocast covers the forward pass and the loss only, never backward or "
            "the step.\n"
            "        with torch.autocast(inputs.device.type, dtype=amp_dtype):\n"
            "            outputs = model(inputs)\n"
            "            loss = task.loss(outputs, targets)\n"
        ) + _AMP_BACKWARD
        if o.clip:
            text += _UNSCALE
    else:
        text += (
            "        outputs = model(inputs)\n"
            "        loss = task.loss(outputs, targets)\n"
            "        loss.backward()\n"
        )
    if o.clip:
        text += (
            "        # R4: after backward, before the step; otherwise clipping does nothing.\n"
            f"        {_CLIP_CALL}\n"
        )
    return text + _update(o)


def _step_arguments(o: Options) -> str:
    return "".join([", scaler, amp_dtype" if o.amp else "", ", max_grad_norm" if o.clip else ""])


def _eval_loop(o: Options) -> str:
    """evaluate()'s loop, exactly as rendered."""
    if o.amp:
        forward = (
            "        with torch.autocast(inputs.device.type, dtype=amp_dtype):\n"
            "            outputs = model(inputs)\n"
            "            loss = task.loss(outputs, targets)\n"
        )
    else:
        forward = "        outputs = model(inputs)\n        loss = task.loss(outputs, targets)\n"
    return (
        "    for inputs, targets in batches:\n"
        + forward
        + "        sums.add(loss, outputs, targets)\n"
    )


def _indented(text: str) -> str:
    return "".join("    " + line if line.strip() else line for line in text.splitlines(True))


def _dedented(text: str) -> str:
    return "".join(line.removeprefix("    ") for line in text.splitlines(True))


def zero_grad_after_the_update(o: Options) -> tuple[Edit, ...]:
    update = _update(o)
    cleared = f"        {_ZERO}  # R2: the next backward() starts from no gradients\n"
    return (Edit("delete", _ZERO), Edit("replace", update, update + cleared))


def zero_grad_at_the_end_of_the_loop_body(o: Options) -> tuple[Edit, ...]:
    cleared = f"        {_ZERO}  # R2: ready for the next batch's backward()\n"
    return (Edit("delete", _ZERO), Edit("replace", _CHECK, _CHECK + cleared))


def step_in_a_helper_function(o: Options) -> tuple[Edit, ...]:
    arguments = _step_arguments(o)
    helper = (
        f"\n\n\ndef train_step(model, inputs, targets, optimizer, task{arguments}):\n"
        '    """One update on one batch; returns its loss, detached from the graph."""\n'
        + _dedented(_step_body(o))
        + "    return loss.detach()"
    )
    call = f"        loss = train_step(model, inputs, targets, optimizer, task{arguments})\n"
    return (
        Edit("replace", _step_body(o), call),
        Edit("replace", _BEFORE_TRAIN_ONE_EPOCH, helper + _BEFORE_TRAIN_ONE_EPOCH),
    )


def validation_in_a_block(manager: str) -> Callable[[Options], tuple[Edit, ...]]:
    """evaluate() without the decorator: its loop runs inside `with <manager>:`."""

    def edits(o: Options) -> tuple[Edit, ...]:
        wrapped = f"    with {manager}:  # R10: no autograd graph in validation\n"
        return (
            Edit("delete", "@torch.no_grad()"),
            Edit("replace", _eval_loop(o), wrapped + _indented(_eval_loop(o))),
        )

    return edits


def autograd_backward(o: Options) -> tuple[Edit, ...]:
    if o.amp:
        return (
            Edit(
                "replace",
                "scaler.scale(loss).backward()",
                "torch.autograd.backward(scaler.scale(loss))",
            ),
        )
    return (
        Edit("replace", "        loss.backward()\n", "        torch.autograd.backward(loss)\n"),
    )


def gradients_from_autograd_grad(o: Options) -> tuple[Edit, ...]:
    backward = _AMP_BACKWARD if o.amp else "        loss.backward()\n"
    target = "scaler.scale(loss)" if o.amp else "loss"
    # The gradients of one call of autograd.grad, put where backward() would have put them.
    assign = (
        "        parameters = [p for p in model.parameters() if p.requires_grad]\n"
        f"        grads = torch.autograd.grad({target}, parameters)\n"
        "        for parameter, grad in zip(parameters, grads, strict=True):\n"
        "            parameter.grad = grad\n"
    )
    return (Edit("replace", backward, assign),)


def step_with_a_closure(o: Options) -> tuple[Edit, ...]:
    """The LBFGS style: the optimizer calls a closure that computes the gradients."""
    clip = f"            {_CLIP_CALL}\n" if o.clip else ""
    closure = (
        "        def closure():\n"
        f"            {_ZERO}\n"
        "            loss = task.loss(model(inputs), targets)\n"
        "            loss.backward()\n"
        f"{clip}"
        "            return loss\n"
        "\n"
        "        loss = optimizer.step(closure)  # R3: one update with this batch's gradients\n"
    )
    return (Edit("replace", _step_body(o), closure),)


EQUIVALENTS = [
    Equivalent("zero_grad right after the optimizer update", "engine.py",
               zero_grad_after_the_update),
    Equivalent("clip_grad_norm_ imported by name", "engine.py",
               (Edit("replace", "from torch import nn\n",
                     "from torch import nn\nfrom torch.nn.utils import clip_grad_norm_\n"),
                Edit("replace", "torch.nn.utils.clip_grad_norm_(", "clip_grad_norm_(")),
               _clip),
    Equivalent("inference_mode instead of no_grad in evaluate", "engine.py",
               (Edit("replace", "@torch.no_grad()", "@torch.inference_mode()"),)),
    Equivalent("model.zero_grad instead of optimizer.zero_grad", "engine.py",
               (Edit("replace", _ZERO, "model.zero_grad(set_to_none=True)"),)),
    Equivalent("loss.item() every step for the epoch mean", "engine.py",
               (Edit("delete", "# R11: detached, so no graph is kept"),
                Edit("replace", "losses.append(loss.detach())",
                     "losses.append(loss.item())  # R11: a float, so no graph is kept"),
                Edit("replace", "not torch.isfinite(losses[-1])", "not math.isfinite(losses[-1])"),
                Edit("replace", _EPOCH_MEAN, _EPOCH_MEAN_OF_FLOATS))),
    # The form most hand-written loops have: a float sum read at every step (issue 24: a
    # running sum of loss.item() must pass as the list of floats above does).
    Equivalent("a running sum of loss.item() * batch size", "engine.py",
               lambda o: (Edit("replace", "    losses, sizes = progress.losses, progress.sizes\n",
                     "    total, count, steps = 0.0, 0, 0\n"),
                Edit("delete", "# R11: detached, so no graph is kept"),
                Edit("replace", "        losses.append(loss.detach())\n"
                     "        sizes.append(len(targets))\n"
                     "        progress.batches += 1\n" + _CHECK,
                     _RUNNING_SUM + "        progress.batches += 1\n"),
                Edit("replace", "            show_progress(bar, losses)\n",
                     "            bar.update()\n"),
                Edit("replace", _EPOCH_MEAN, "    mean_loss = total / count\n"),
                *([Edit("replace", "skipped = len(losses)", "skipped = steps")] if o.amp else []))),
    Equivalent("model.train(False) instead of model.eval()", "engine.py",
               (Edit("replace", "model.eval()", "model.train(False)"),)),
    Equivalent("enumerate over the training batches", "engine.py",
               (Edit("replace", _TRAIN_LOOP,
                     _TRAIN_LOOP.replace("for inputs, targets in batches",
                                         "for i, (inputs, targets) in enumerate(batches)")),
                Edit("replace", "if len(losses) % CHECK_EVERY == 0",
                     "if (i + 1) % CHECK_EVERY == 0"))),
    Equivalent("the step in a helper function", "engine.py", step_in_a_helper_function),
    Equivalent("zero_grad(set_to_none=False)", "engine.py",
               (Edit("replace", _ZERO_LINE,
                     "        optimizer.zero_grad(set_to_none=False)  # R2: zero the last step's "
                     "gradients\n"),)),
    Equivalent("clipping inside a helper function", "engine.py",
               (Edit("replace", _CLIP_CALL, "clip(model, max_grad_norm)"),
                Edit("replace", _BEFORE_TRAIN_ONE_EPOCH, _CLIP_HELPER + _BEFORE_TRAIN_ONE_EPOCH)),
               _clip),
    Equivalent("torch.autograd.backward instead of .backward()", "engine.py", autograd_backward),
    Equivalent("a no_grad block in evaluate instead of the decorator", "engine.py",
               validation_in_a_block("torch.no_grad()")),
    Equivalent("a set_grad_enabled(False) block in evaluate", "engine.py",
               validation_in_a_block("torch.set_grad_enabled(False)")),
    Equivalent("autocast imported from torch", "engine.py",
               (Edit("replace", "from torch import nn\n", "from torch import autocast, nn\n"),
                Edit("replace", "step.\n        with torch.autocast(",
                     "step.\n        with autocast("),
                Edit("replace", "    for inputs, targets in batches:\n        with torch.autocast(",
                     "    for inputs, targets in batches:\n        with autocast(")),
               _amp),
    Equivalent("clip_grad_norm_ with keyword arguments", "engine.py",
               (Edit("replace", "(model.parameters(), max_grad_norm)",
                     "(model.parameters(), max_norm=max_grad_norm, norm_type=2.0)"),),
               _clip),
    Equivalent("zero_grad at the end of the loop body", "engine.py",
               zero_grad_at_the_end_of_the_loop_body),
    Equivalent("model.train() at every step", "engine.py",
               (Edit("delete", "model.train()  # R9"),
                Edit("replace", _TRAIN_LOOP,
                     _TRAIN_LOOP.replace("\n", "\n        model.train()  # R9: at every step\n"))),
               ),
    Equivalent("evaluate restores the mode it found", "engine.py",
               (Edit("replace", "    model.eval()",
                     "    was_training = model.training\n    model.eval()"),
                Edit("replace", "    return sums.compute()",
                     "    model.train(was_training)\n    return sums.compute()"))),
    Equivalent("gradients set to None by hand", "engine.py",
               (Edit("replace", _ZERO,
                     "for parameter in model.parameters():\n            parameter.grad = None"),)),
    Equivalent("gradients from torch.autograd.grad", "engine.py", gradients_from_autograd_grad),
    Equivalent("optimizer.step with a closure", "engine.py", step_with_a_closure,
               lambda o: not o.amp),  # GradScaler.step takes no closure
    Equivalent("model moved to the device where it is built", "train.py",
               (Edit("delete", "model.to(device)"),
                Edit("replace", "data.task.output_dim)\n", "data.task.output_dim).to(device)\n"))),
    Equivalent("plateau step with metrics= keyword", "train.py",
               (Edit("replace", 'step(val["loss"])', 'step(metrics=val["loss"])'),),
               lambda o: o.scheduler == "plateau"),
    Equivalent("cosine step before validation", "train.py",
               (Edit("move_before", "scheduler.step()", "val = evaluate("),),
               lambda o: o.scheduler == "cosine" and not o.warmup_steps),
    Equivalent("warm-up stepped right after optimizer.step()", "engine.py",
               (Edit("replace", "        if schedule is not None:\n"
                     "            schedule.step()  # R7: "
                     "once per optimizer step, after it: the next step's rate\n", ""),
                Edit("replace",
                     "        optimizer.step()  # R3: update with this batch's gradients\n",
                     "        optimizer.step()\n        if schedule is not None:\n"
                     "            schedule.step()\n")),
               lambda o: o.warmup_steps > 0 and not o.amp),
    Equivalent("EMA update as a lerp_ per tensor", "ema.py",
               (Edit("replace", "torch._foreach_lerp_(self.averaged, self.current, 1.0 - decay)",
                     "for average, current in zip(self.averaged, self.current, strict=True):\n"
                     "            average.lerp_(current, 1.0 - decay)"),),
               lambda o: o.ema),
    # The accumulating loop's own rewrites.
    Equivalent("windows cut with itertools.islice", "engine.py",
               (Edit("replace", "import math\n", "import itertools\nimport math\n"),
                Edit("replace", _WINDOWS, _WINDOWS_BY_ISLICE)),
               _accumulating),
    Equivalent("zero_grad right after the window's update", "engine.py",
               (Edit("delete", "# R2, R14: once per window, before its backward"),
                Edit("replace", _AFTER_WINDOW_UPDATE,
                     "        optimizer.zero_grad(set_to_none=True)  # R2: the next window starts "
                     "from none\n" + _AFTER_WINDOW_UPDATE)),
               _accumulating),
    # torch.compile's rewrites are also run through tests/test_compile.py, which compiles.
    Equivalent("the compiled module's inner model saved (_orig_mod)", "train.py",
               (Edit("replace", "    training = TrainingState(\n        model=model,",
                     "    training = TrainingState(\n"
                     '        model=getattr(compiled, "_orig_mod", compiled),'),),
               lambda o: o.compile, ("tests/test_compile.py",)),
    Equivalent("compiled with dynamic shapes from the first batch", "compiling.py",
               (Edit("replace", "DYNAMIC = None", "DYNAMIC = True"),),
               lambda o: o.compile, ("tests/test_compile.py",)),
]  # fmt: skip

# The distributed option's loop is the one-process loop plus two sums over the processes (the
# epoch's loss, its validation sums) and one at the divergence check: the rewrites run on the
# one-process renders of the covering set only, which keeps the suite inside CI's time.
# The accumulating loop (grad_accum above 1) is another function: the rewrites of the loop
# that steps once per batch do not fit it, except these, which touch what both loops share
# (evaluate, the model's placement, the zero_grad call, clipping, the schedule), and its own.
FIT_EITHER_LOOP = {
    "clip_grad_norm_ imported by name",
    "inference_mode instead of no_grad in evaluate",
    "model.zero_grad instead of optimizer.zero_grad",
    "model.train(False) instead of model.eval()",
    "a no_grad block in evaluate instead of the decorator",
    "a set_grad_enabled(False) block in evaluate",
    "clipping inside a helper function",
    "clip_grad_norm_ with keyword arguments",
    "zero_grad at the end of the loop body",
    "evaluate restores the mode it found",
    "gradients set to None by hand",
    "model moved to the device where it is built",
    "plateau step with metrics= keyword",
    "cosine step before validation",
    "EMA update as a lerp_ per tensor",
    "windows cut with itertools.islice",
    "zero_grad right after the window's update",
}
assert FIT_EITHER_LOOP <= {e.rewrite for e in EQUIVALENTS}, "a name above names no rewrite"
EQUIVALENTS = [
    replace(
        e,
        applies=lambda o, applies=e.applies, either=e.rewrite in FIT_EITHER_LOOP: (
            applies(o) and not o.distributed and (o.grad_accum == 1 or either)
        ),
    )
    for e in EQUIVALENTS
]


# Trains a small run on the CPU, with each autocast dtype the project offers, and prints a
# digest of the final weights and the history: a rewrite must give the generated code's.
FINGERPRINT = """
import dataclasses, hashlib, json, sys
import task_cases
from {package} import train
from {package}.config import Config, load_config

fields = {{f.name for f in dataclasses.fields(Config)}}
prints = {{}}
for dtype in ("bfloat16", "float16") if "amp_dtype" in fields else ("none",):
    out = f"{{sys.argv[1]}}/{{dtype}}"
    # The task's small model, as the loop tests run it. 200 samples: 160 to train on (64 + 64 +
    # a ragged 32) and 40 to validate.
    settings = ["n_samples=200", "epochs=3", "device=cpu", f"out={{out}}"]
    if "amp_dtype" in fields:
        settings.append(f"amp_dtype={{dtype}}")
    if "max_grad_norm" in fields:
        settings.append("max_grad_norm=0.5")  # low enough that some steps are clipped
    if "compile" in fields:
        settings.append("compile=false")  # eager, as the loop tests run (not test_compile.py)
    result = train.fit(load_config(None, [*task_cases.SMALL, *settings]))
    digest = hashlib.sha256()
    for name, tensor in sorted(result["model"].state_dict().items()):
        digest.update(name.encode() + tensor.cpu().numpy().tobytes())
    prints[dtype] = {{"weights": digest.hexdigest(), "history": result["history"]}}
print(json.dumps(prints))
"""


def training_fingerprint(project: Path, package: str, isolation: str = "fork") -> dict:
    """What a short CPU run of the project ends with: its weights' digest and its history."""
    with tempfile.TemporaryDirectory() as out:
        source = FINGERPRINT.format(package=package)
        if isolation == "fork":
            done = forkrun.POOL.run(
                {"kind": "script", "cwd": str(project), "sys_path": ["src", "tests"],
                 "source": source, "argv": [out], "log": f"{out}/fingerprint.log",
                 "timeout": 600}
            )  # fmt: skip
            lines = done.get("output", "").strip().splitlines() or ["no output"]
            if not done.get("ok"):
                return {"error": (done.get("crashed") or lines[-1]).strip().splitlines()[-1]}
            return json.loads(lines[-1])
        done = subprocess.run(
            [sys.executable, "-c", source, out],
            cwd=project, env={**os.environ, "PYTHONPATH": "src:tests", "OMP_NUM_THREADS": "1"},
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["no output"])[-1]}
    return json.loads(done.stdout.splitlines()[-1])


def differences(expected: dict, got: dict) -> list[str]:
    """How a rewrite's training differs from the generated code's; empty when it does not.

    Weights must match bit for bit. Epoch metrics may differ in their last digits, since a
    rewrite may sum the losses in another order."""
    if "error" in got:
        return [f"training failed: {got['error']}"]
    found = []
    for dtype, mine in got.items():
        theirs = expected[dtype]
        where = "" if dtype == "none" else f" ({dtype})"
        if mine["weights"] != theirs["weights"]:
            found.append(f"final weights differ{where}")
        if [r.keys() for r in mine["history"]] != [r.keys() for r in theirs["history"]]:
            found.append(f"history has other epochs or columns{where}")
            continue
        for row, their_row in zip(mine["history"], theirs["history"], strict=True):
            for key, value in row.items():
                if not math.isclose(value, their_row[key], rel_tol=1e-9, abs_tol=1e-12):
                    found.append(f"epoch {row['epoch']} {key} {value!r}, not {their_row[key]!r}")
    return found


@dataclass
class Result:
    equivalent: Equivalent
    combo: str
    ran: bool  # imported, and its loop tests ran to the end
    failures: dict[str, str]  # failing test -> its failure message
    detail: str = ""
    # How its training differs from the generated code's: if not empty, the rewrite is wrong.
    trains_differently: list[str] = field(default_factory=list)

    @property
    def passes(self) -> bool:
        return self.ran and not self.failures and not self.trains_differently

    def record(self) -> dict:
        """What the table needs, as JSON (the rewrite by its place in EQUIVALENTS)."""
        fields = ("combo", "ran", "failures", "detail", "trains_differently")
        return {"equivalent": EQUIVALENTS.index(self.equivalent)} | {
            f: getattr(self, f) for f in fields
        }

    @classmethod
    def from_record(cls, record: dict) -> "Result":
        fields = ("combo", "ran", "failures", "detail", "trains_differently")
        return cls(EQUIVALENTS[record["equivalent"]], *(record[f] for f in fields))


# Every rewrite on every combination of the covering set it applies to: the proof tier's cases.
CASES = [(o, e) for o in COVERING for e in EQUIVALENTS if needed(o, e.applies, e.file)]


def case_key(options: Options, equivalent: Equivalent) -> str:
    from tests.conftest import combo_id

    return f"{combo_id(options)}:{equivalent.slug}"


def run_equivalent(
    project: Path,
    package: str,
    equivalent: Equivalent,
    options: Options,
    combo: str,
    work: Path,
    expected: dict | None = None,
    isolation: str = "fork",
) -> Result:
    """Copy the project, rewrite its loop, run the copy's loop tests, and check that it trains
    as the generated code does (`expected`: the original's fingerprint, if already known).
    With the fork runner the tests stop at the first failure: one is enough to fail it."""
    edits = equivalent.edits_for(options)
    run = run_edited(
        project, package, equivalent.file, edits, work, equivalent.tests,
        stop_at_first=isolation == "fork", isolation=isolation,
    )  # fmt: skip
    result = Result(equivalent, combo, run.finished, run.failures, run.detail)
    if run.finished:
        expected = expected or training_fingerprint(project, package, isolation)
        result.trains_differently = differences(
            expected, training_fingerprint(work / project.name, package, isolation)
        )
    return result


def first_line(message: str) -> str:
    """A failure message's first line, without pytest's exception prefix, fit for a table."""
    line = (message.strip().splitlines() or [""])[0]
    line = re.sub(r"^(AssertionError|Failed): ", "", line)
    return line.replace("|", "\\|")[:200]


def _cell(result: Result) -> str:
    if result.passes:
        return "passes"
    if result.trains_differently:  # the rewrite is wrong, whatever the tests said
        return "**trains differently**: " + "; ".join(result.trains_differently[:3])
    if not result.ran:
        last = (result.detail.strip().splitlines() or ["no output"])[-1]
        return f"**did not run**: {first_line(last)}"
    failing = {}  # a message shared by several parametrised runs is listed once
    for name, message in sorted(result.failures.items()):
        base, _, param = name.removeprefix("test_").partition("[")
        failing.setdefault((base, first_line(message)), []).append(param.rstrip("]"))
    return "<br>".join(
        f"**{base}**"
        + (f" ({', '.join(p for p in params if p)})" if any(params) else "")
        + f": {message}"
        for (base, message), params in failing.items()
    )


def table(results: list[Result]) -> str:
    """Markdown: one row per rewrite, one column per combination, 'passes' or what failed."""
    combos = list(dict.fromkeys(r.combo for r in results))
    rows: dict[str, dict[str, str]] = {}
    for r in results:
        rows.setdefault(r.equivalent.rewrite, {})[r.combo] = _cell(r)
    failing = {r.equivalent.rewrite for r in results if not r.passes}
    lines = [
        f"{len(rows) - len(failing)} of {len(rows)} equivalents pass every loop test "
        f"({sum(r.passes for r in results)} of {len(results)} renders).",
        "",
        "| file | rewrite | " + " | ".join(f"`{c}`" for c in combos) + " |",
        "|---|---|" + "---|" * len(combos),
    ]
    for e in EQUIVALENTS:
        if e.rewrite in rows:
            cells = [rows[e.rewrite].get(c, absent_cell(c, e.applies, e.file)) for c in combos]
            lines.append(f"| {e.file} | {e.rewrite} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_table(results: list[Result], path: Path = tables.EQUIVALENTS_TABLE) -> None:
    about = (
        "Each row is a correct rewrite of the generated training loop, one a user might make. "
        "Each one\ntrains exactly as the generated code does (checked: a short CPU run ends with "
        "bit-identical\nweights), so every loop test that judges a rule (contract, "
        "reproducibility) must still pass. A\ncell names the first failing test and the first "
        "line of its message. The proof tier (`python -m\npytest -n 2 --proof`) rewrites this "
        "file when it runs every rewrite; `python -m tests.equivalents\n--out "
        "docs/equivalents-table.md` does the same outside pytest."
    )
    combos = list(dict.fromkeys(r.combo for r in results))
    tables.write(path, "Equivalents table", about, table(results), combos)


def write_recorded_table() -> bool:
    """Write the table from the proof tier's records, if every case has one."""
    records = tables.every_record("equivalents", [case_key(o, e) for o, e in CASES])
    if records is not None:
        write_table([Result.from_record(r) for r in records])
    return records is not None


def main(argv: list[str] | None = None) -> int:
    from tests.conftest import COMBOS, combo_id, render

    parser = argparse.ArgumentParser(prog="python -m tests.equivalents", description=__doc__)
    parser.add_argument(
        "--all", action="store_true", help="every combination, not the covering set"
    )
    parser.add_argument("--out", type=Path, help="also write the markdown table here")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", help="run only the rewrites whose slug contains this")
    parser.add_argument(
        "--combo", action="append", default=[], metavar="REGEX",
        help="only the combinations whose id matches this regular expression (repeatable)",
    )  # fmt: skip
    args = parser.parse_args(argv)

    def chosen(options: Options, equivalent: Equivalent) -> bool:
        return needed(options, equivalent.applies, equivalent.file) and (
            (args.only or "") in equivalent.slug
        )

    with tempfile.TemporaryDirectory() as tmp:
        jobs = []
        for options in COMBOS if args.all else COVERING:
            combo = combo_id(options)
            if args.combo and not any(re.search(c, combo) for c in args.combo):
                continue
            if not any(chosen(options, e) for e in EQUIVALENTS):
                continue  # nothing to run: no render, no fingerprint
            project = render(Path(tmp) / "projects" / f"eq-{combo}", options).dest
            package = project.name.replace("-", "_")
            expected = training_fingerprint(project, package)
            for equivalent in EQUIVALENTS:
                if chosen(options, equivalent):
                    work = Path(tmp) / "work" / f"{combo}-{equivalent.slug}"
                    jobs.append((project, package, equivalent, options, combo, work, expected))
        with ThreadPoolExecutor(args.jobs) as pool:
            results = list(pool.map(lambda job: run_equivalent(*job), jobs))
    text = table(results)
    print(text)
    if args.out:
        write_table(results, args.out)
    return 0 if all(r.passes for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
