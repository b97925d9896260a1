"""The rule table of `scaffold check`: codes, the loop rule each guards, messages and fixes."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    """One kind of finding: its code, the rule of loop-rules.md it guards, what and how to fix."""

    code: str
    rule: str
    message: str
    fix: str
    # Off unless selected (--select R12, or ALL): conventions of reproducible, comparable runs
    # that much correct code does not follow, where the rest are bugs in what gets trained.
    default: bool = True


# Codes read SCF + the rule's number + a two-digit index: SCF201 is R2's first check and
# SCF1001 is R10's. The checkpoint rules (C1-C4) follow the loop rules' numbers at 20 + n, so
# C3 is SCF2301, and the seeding rules (S1-S5) at 30 + n: S1 is SCF3101.
_RULES = [
    Rule(
        "SCF101",
        "R1",
        "a parameter the optimizer holds is replaced after it was built (a new submodule or "
        "Parameter, the model rebuilt or sharded by FSDP, a tensor re-bound by .to()): the "
        "optimizer keeps updating the old object",
        "build the optimizer once the model's final parameters exist (moving or casting a "
        "module in place with .to()/.half() is fine since torch 2.0)",
    ),
    Rule(
        "SCF201",
        "R2",
        "zero_grad() between backward() and step() erases the gradients before the update",
        "call zero_grad() before backward(), or after step()",
    ),
    Rule(
        "SCF202",
        "R2",
        "no zero_grad() in this training step: gradients of every batch add up",
        "call optimizer.zero_grad(set_to_none=True) once per step, before backward()",
    ),
    Rule(
        "SCF301",
        "R3",
        "step() before backward() in this training step updates with stale or no gradients",
        "call step() after backward()",
    ),
    Rule(
        "SCF302",
        "R3",
        "weight average (EMA/SWA) updated before optimizer.step() in the same step: it "
        "averages the weights of the step before and never sees the last update",
        "update the average right after the optimizer step (after scaler.step/update with AMP)",
    ),
    Rule(
        "SCF401",
        "R4",
        "gradient clipping outside backward() -> step() does nothing",
        "clip after backward() and before step()",
    ),
    Rule(
        "SCF501",
        "R5",
        "clipping scaled gradients without scaler.unscale_() first: the threshold is off by "
        "the scale factor",
        "call scaler.unscale_(optimizer) before clipping",
    ),
    Rule(
        "SCF502",
        "R5",
        "optimizer.step() after a scaled backward() bypasses the GradScaler's inf/nan skip",
        "call scaler.step(optimizer) then scaler.update()",
    ),
    Rule(
        "SCF503",
        "R5",
        "scaler.step() after a backward() of the unscaled loss: it divides gradients that "
        "were never multiplied",
        "backpropagate scaler.scale(loss)",
    ),
    Rule(
        "SCF504",
        "R5",
        "scaler.step() and no scaler.update() in this training step: the scale never adapts",
        "call scaler.update() after scaler.step(optimizer)",
    ),
    Rule(
        "SCF601",
        "R6",
        "backward() or step() inside an autocast block: autocast is for the forward pass "
        "and the loss only",
        "end the `with torch.autocast(...)` block after the loss",
    ),
    Rule(
        "SCF602",
        "R6",
        "GradScaler enabled where the autocast dtype can be bfloat16, which needs no loss scaling",
        "enable it for float16 only: GradScaler(device, enabled=dtype == torch.float16)",
    ),
    Rule(
        "SCF701",
        "R7",
        "epoch scheduler stepped in the batch loop: the learning rate decays once per batch",
        "step it once per epoch, after the batch loop, or count its length in steps",
    ),
    Rule(
        "SCF702",
        "R7",
        "epoch scheduler stepped before the epoch's training pass: the first epoch never "
        "trains at the initial learning rate",
        "step it after the epoch's optimizer steps",
    ),
    Rule(
        "SCF703",
        "R7",
        "per-step schedule stepped once per epoch: its warm-up or cycle stretches over "
        "len(loader) times as many epochs",
        "step it after every optimizer.step(), in the batch loop",
    ),
    Rule(
        "SCF801",
        "R8",
        "ReduceLROnPlateau.step() without the monitored metric",
        "pass the validation value: scheduler.step(val_loss)",
    ),
    Rule(
        "SCF802",
        "R8",
        "ReduceLROnPlateau fed a training value: it lowers the rate on the training curve, "
        "not on generalisation",
        "pass the validation metric, after validation",
    ),
    Rule(
        "SCF803",
        "R8",
        "ReduceLROnPlateau mode does not match its metric: it lowers the rate while the "
        "model improves",
        'use mode="min" for a loss, mode="max" for accuracy-like metrics',
    ),
    Rule(
        "SCF901",
        "R9",
        "model.eval() in the epoch loop and no model.train() before the next training pass: "
        "dropout and BatchNorm stay in eval mode",
        "call model.train() at the start of each training pass",
    ),
    Rule(
        "SCF1001",
        "R10",
        "evaluation loop without torch.no_grad() or torch.inference_mode(): an autograd graph "
        "is built for every batch",
        "wrap it in `with torch.no_grad():` or decorate the function with @torch.no_grad()",
    ),
    Rule(
        "SCF1002",
        "R10",
        "evaluation with the model still in training mode: dropout and BatchNorm batch "
        "statistics change the metrics",
        "call model.eval() before the evaluation loop",
    ),
    Rule(
        "SCF1101",
        "R11",
        "loss tensor kept across steps: each one pins its autograd graph in memory",
        "keep loss.item() or loss.detach() instead",
    ),
    Rule(
        "SCF1201",
        "R12",
        "epoch mean taken per batch: a smaller last batch weighs as much as a full one",
        "sum value * batch size and divide by the number of samples",
        default=False,
    ),
    Rule(
        "SCF1401",
        "R14",
        "gradients accumulated over several batches but the loss is not divided: the "
        "effective learning rate grows with the accumulation steps",
        "backpropagate loss / accumulation_steps",
    ),
    Rule(
        "SCF1402",
        "R14",
        "zero_grad() on every micro-batch while step() runs every k-th: the gradients "
        "accumulated so far are erased, each update sees the last micro-batch alone",
        "call zero_grad() once per optimizer step, right after step() (under the same condition)",
    ),
    Rule(
        "SCF1403",
        "R14",
        "step() on every micro-batch while zero_grad() runs every k-th: each update applies "
        "the partial sum again, the first micro-batch's gradients up to k times",
        "call step() (and clipping, the scaler's update) under the same every-k-th condition "
        "as zero_grad()",
    ),
    Rule(
        "SCF1501",
        "R15",
        "DistributedSampler and no set_epoch(): every epoch sees the same shuffle",
        "call sampler.set_epoch(epoch) at the start of every epoch",
    ),
    Rule(
        "SCF2301",
        "C3",
        "torch.load() without weights_only: before torch 2.6 it unpickles anything (a crafted "
        "file runs code); from 2.6 it defaults to True and refuses pickled objects",
        "pass weights_only=True for state dicts and tensors; for other objects, allow their "
        "classes with torch.serialization.add_safe_globals([...]), or pass weights_only=False "
        "for files you trust",
    ),
    Rule(
        "SCF2401",
        "C4",
        "state dict of a torch.compile()d module saved: every key starts with `_orig_mod.`, so "
        "the checkpoint loads only into a compiled model",
        "save the original module's state dict (keep `model` and train `compiled = "
        "torch.compile(model)`, or save `compiled._orig_mod.state_dict()`)",
    ),
    Rule(
        "SCF3101",
        "S1",
        "model or optimizer built for training with nothing seeded before it: weights and "
        "batch order change from run to run",
        "seed random, numpy and torch (torch.manual_seed) before the model and data are built",
        default=False,
    ),
    Rule(
        "SCF3201",
        "S2",
        "DataLoader with worker processes and no seeded generator: its order and the "
        "workers' seeds depend on every earlier draw from the global RNG",
        "pass generator=torch.Generator().manual_seed(seed)",
        default=False,
    ),
]

RULES = {rule.code: rule for rule in _RULES}


@dataclass(frozen=True, order=True)
class Finding:
    """One finding at a 1-based line and column of a file."""

    path: str
    line: int
    column: int
    code: str

    @property
    def rule(self) -> Rule:
        return RULES[self.code]


def matches(code: str, selectors) -> bool:
    """Whether a code is named by one of the selectors: a code, a code prefix, a rule id, or
    ALL."""
    rule = RULES[code].rule
    return any(
        code.startswith(s.strip().upper()) or s.strip().upper() in (rule, "ALL") for s in selectors
    )


def selected(code: str, select=(), ignore=()) -> bool:
    """Whether a code is reported: selected (or on by default when nothing is), not ignored."""
    chosen = matches(code, select) if select else RULES[code].default
    return chosen and not (ignore and matches(code, ignore))


def unknown_selectors(selectors) -> list[str]:
    """The selectors that name no rule: a typo would otherwise silently select nothing."""
    return [s for s in selectors if not any(matches(code, [s]) for code in RULES)]
