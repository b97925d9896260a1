"""`scaffold check`: no finding on correct loops, every injected bug found at its line."""

import ast
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from scaffold import cli
from scaffold.check.files import noqa_lines, read_source
from scaffold.check.rules import RULES
from scaffold.check.run import check_paths, check_sources
from tests.conftest import COVERING, REPO, combo_id

CORPUS = Path(__file__).parent / "check_corpus"
# Each unit is checked on its own: one file, or split/, a loop spread over two files.
UNITS = [[path] for path in sorted(CORPUS.glob("*.py"))] + [sorted((CORPUS / "split").glob("*.py"))]
DEFAULT = [code for code, rule in RULES.items() if rule.default]
runner = CliRunner()


def unit_id(unit: list[Path]) -> str:
    return unit[0].stem if len(unit) == 1 else unit[0].parent.name


def findings_of(text: str, tmp_path: Path, name="loop.py") -> list[tuple[int, str]]:
    path = tmp_path / name
    path.write_text(text)
    result = check_paths([str(path)])
    assert not result.problems, result.problems
    return [(f.line, f.code) for f in result.findings]


# --- the corpus of correct loops ---


@pytest.mark.parametrize("unit", UNITS, ids=unit_id)
def test_correct_loops_have_no_finding(unit):
    result = check_paths([str(path) for path in unit])
    assert result.files == len(unit) and not result.problems
    assert [f"{f.line}: {f.code}" for f in result.findings] == []


# The opt-in rules (R12's per-batch mean, S1's seeding) on the corpus: the files that do not
# seed, and those that average per batch, as much correct code does. Every other file and rule
# stays silent.
OPT_IN_FINDINGS = {
    "accumulation": {"SCF1201", "SCF3101"},
    "amp_precision_choice": {"SCF3101"},
    "grad_divided": {"SCF3101"},
    "step_factory": {"SCF1201"},
    "nan_skip": {"SCF1201"},
    "optional_encoder": {"SCF1201"},
    "class_trainer": {"SCF3101"},
    "ema_class_trainer": {"SCF3101"},
    "amp_flag": {"SCF3101"},
    "amp_resume": {"SCF3101"},
    "functions": {"SCF3101"},
    "gan": {"SCF3101"},
    "helper_same_file": {"SCF1201", "SCF3101"},
    "lbfgs_closure": {"SCF3101"},
    "linear_probe": {"SCF3101"},
    "manual_optimizer": {"SCF1201"},
    "phase_loop": {"SCF1201", "SCF3101"},
    "plain_script": {"SCF3101"},
    "plateau_val": {"SCF1201", "SCF3101"},
    "while_loop": {"SCF3101"},
    "zero_at_end": {"SCF1201", "SCF3101"},
}


@pytest.mark.parametrize("unit", UNITS, ids=unit_id)
def test_opt_in_rules_on_the_corpus(unit):
    result = check_paths([str(path) for path in unit], select=["ALL"])
    assert {f.code for f in result.findings} == OPT_IN_FINDINGS.get(unit_id(unit), set())


# --- injected bugs: each mutation edits the lines tagged `# [tag]` of a correct loop ---


def tagged(lines: list[str], tag: str) -> int | None:
    marks = [i for i, line in enumerate(lines) if f"[{tag}]" in line.partition("  # ")[2]]
    return marks[0] if marks else None


def indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def move(lines, tag, anchor, after=True):
    """The tagged line moved next to the anchor line, at the anchor's indentation."""
    source, target = tagged(lines, tag), tagged(lines, anchor)
    if source is None or target is None:
        return None
    line = indent(lines[target]) + lines[source].lstrip()
    rest = lines[:source] + lines[source + 1 :]
    target = tagged(rest, anchor)
    at = target + 1 if after else target
    return rest[:at] + [line] + rest[at:]


def swap(lines, target):
    """After the optimizer is built from `m.parameters()`, a new module put at `target`
    (`m.head`, or `m` itself), tagged [swap]: the optimizer holds the old parameters."""
    index = tagged(lines, "optim")
    found = re.search(r"([\w.]+)\.parameters\(\)", lines[index]) if index is not None else None
    if found is None:
        return None
    swapped = target.format(m=found.group(1))
    line = f"{indent(lines[index])}{swapped} = torch.nn.Linear(4, 2)  # [swap]\n"
    return [*lines[: index + 1], line, *lines[index + 1 :]]


def delete(lines, tag):
    index = tagged(lines, tag)
    return None if index is None else lines[:index] + lines[index + 1 :]


def edit(lines, tag, change):
    index = tagged(lines, tag)
    if index is None:
        return None
    new = change(lines[index])
    if new is None or new == lines[index]:
        return None
    return [*lines[:index], new, *lines[index + 1 :]]


def direct_step(line):
    """`scaler.step(optimizer)` -> `optimizer.step()`."""
    code, _, comment = line.partition("  #")
    head, found, arg = code.partition("scaler.step(")
    if not found:
        return None
    owner = head.rsplit(" ", 1)[-1]  # `self.` of self.scaler, if any
    return f"{indent(line)}{arg.rstrip()[:-1]}.step()  #{comment}".replace(owner + owner, owner)


def no_metric(line):
    code, _, comment = line.partition("  #")
    return f"{code[: code.index('.step(') + 6]})  #{comment}"


def without_no_grad(line):
    if line.lstrip().startswith("@"):
        return "\n"  # the decorator removed
    return f"{indent(line)}if True:  # {line.split('# ')[-1]}"


def keep_tensor(line):
    for wrapped, bare in ((".item()", ""), (".detach()", ""), ("float(loss)", "loss")):
        if wrapped in line:
            return line.replace(wrapped, bare, 1)
    return None


def unscaled_backward(line):
    """`scaler.scale(loss).backward()` -> `loss.backward()`."""
    code, _, comment = line.partition("  #")
    head, found, rest = code.partition("scaler.scale(")
    if not found:
        return None
    loss = rest[: rest.index(")")]
    loss = f"({loss})" if " " in loss else loss  # keep a division: (loss / k).backward()
    return f"{indent(line)}{loss}.backward()  #{comment}"


def unsafe_load(line):
    return line.replace(", weights_only=True", "")


def always_on(line):
    """`GradScaler("cuda", enabled=...)` -> `GradScaler("cuda")`."""
    code, _, comment = line.partition("  #")
    if "enabled=" not in code:
        return None
    head = code[: code.index("enabled=")].rstrip(", ")
    return f"{head})  #{comment}"


def training_value(line):
    """`scheduler.step(val_loss)` -> `scheduler.step(loss)`, the last training batch's loss."""
    code, _, comment = line.partition("  #")
    return f"{code[: code.index('.step(') + 6]}loss)  #{comment}"


def flip_mode(line):
    if 'mode="min"' in line:
        return line.replace('mode="min"', 'mode="max"')
    if 'mode="max"' in line:
        return line.replace('mode="max"', 'mode="min"')
    code, _, comment = line.partition("  #")
    return f'{code.rstrip()[:-1]}, mode="max")  #{comment}'


def undivided(line):
    """`loss / k` -> `loss`: the accumulated loss is no longer divided."""
    code, _, comment = line.partition("  #")
    changed = re.sub(r" / \w+", "", code, count=1)
    return None if changed == code else f"{changed}  #{comment}"


def per_batch(line):
    """`total / len(loader.dataset)` -> `total / len(loader)`."""
    return line.replace(".dataset)", ")", 1) if ".dataset)" in line else None


def accumulating(lines) -> bool:
    """Whether a file accumulates gradients: its loss is divided by the accumulation count."""
    return tagged(lines, "divide") is not None


def step_every_micro_batch(lines):
    """The update lines (unscale_, clipping, step, the scaler's update) taken out of the
    every-k-th `if` that holds [step], to just before it; zero_grad stays inside."""
    at = tagged(lines, "step")
    if at is None or not accumulating(lines):
        return None
    head = next(
        (i for i in range(at - 1, -1, -1) if len(indent(lines[i])) < len(indent(lines[at]))), None
    )
    if head is None or not lines[head].lstrip().startswith("if "):
        return None
    moved = [
        i
        for i in range(head + 1, len(lines))
        if any(tagged([lines[i]], t) == 0 for t in ("unscale", "clip", "step", "update"))
        and len(indent(lines[i])) > len(indent(lines[head]))
    ]
    out = [indent(lines[head]) + lines[i].lstrip() for i in moved]
    rest = [line for i, line in enumerate(lines) if i not in moved]
    return rest[:head] + out + rest[head:]


def compiled_saved(lines):
    """`state = {"model": model.state_dict(), ...}` -> the compiled module's state dict."""
    at, save = tagged(lines, "compile"), tagged(lines, "save")
    if at is None or save is None:
        return None
    name = lines[at].split("=")[0].strip()
    found = re.search(r"([\w.]+)\.state_dict\(\)", lines[save])
    if found is None or found.group(1) == name:
        return None
    return edit(lines, "save", lambda line: line.replace(found.group(0), f"{name}.state_dict()", 1))


def in_scope_of_loss(lines):
    """Whether the training step's loss is named `loss` in the function that steps the plateau."""
    at = tagged(lines, "plateau")
    if at is None:
        return False
    start = max((i for i in range(at) if lines[i].lstrip().startswith("def ")), default=0)
    return any(line.lstrip().startswith("loss = ") for line in lines[start:at])


# (what the bug is, its code, the tag of the line it must be reported at, the mutation)
MUTATIONS = [
    ("zero_grad removed", "SCF202", "step", lambda ls: delete(ls, "zero")),
    ("zero_grad after backward", "SCF201", "zero", lambda ls: move(ls, "zero", "backward")),
    ("step before backward", "SCF301", "step", lambda ls: move(ls, "step", "backward", False)),
    ("clip after step", "SCF401", "clip", lambda ls: move(ls, "clip", "step")),
    ("clip before backward", "SCF401", "clip", lambda ls: move(ls, "clip", "backward", False)),
    ("clip without unscale_", "SCF501", "clip", lambda ls: delete(ls, "unscale")),
    ("optimizer.step() with a scaler", "SCF502", "step", lambda ls: edit(ls, "step", direct_step)),
    (
        "backward of the unscaled loss",
        "SCF503",
        "step",
        lambda ls: edit(ls, "backward", unscaled_backward),
    ),
    ("scaler.update() removed", "SCF504", "step", lambda ls: delete(ls, "update")),
    ("epoch scheduler per batch", "SCF701", "sched", lambda ls: move(ls, "sched", "step")),
    ("plateau without metric", "SCF801", "plateau", lambda ls: edit(ls, "plateau", no_metric)),
    ("model.train() removed", "SCF901", "eval", lambda ls: delete(ls, "train")),
    ("no no_grad", "SCF1001", "evalloop", lambda ls: edit(ls, "nograd", without_no_grad)),
    ("loss tensor kept", "SCF1101", "accum", lambda ls: edit(ls, "accum", keep_tensor)),
    ("a layer replaced after the optimizer", "SCF101", "swap", lambda ls: swap(ls, "{m}.head")),
    ("the model rebuilt after the optimizer", "SCF101", "swap", lambda ls: swap(ls, "{m}")),
    ("no weights_only", "SCF2301", "load", lambda ls: edit(ls, "load", unsafe_load)),
    ("backward inside autocast", "SCF601", "backward", lambda ls: move(ls, "backward", "fwd")),
    ("GradScaler on for bf16", "SCF602", "scaler", lambda ls: edit(ls, "scaler", always_on)),
    (
        "epoch scheduler before the pass",
        "SCF702",
        "sched",
        lambda ls: move(ls, "sched", "pass", False),
    ),
    (
        "per-step schedule per epoch",
        "SCF703",
        "perstep",
        lambda ls: move(ls, "perstep", "epochend"),
    ),
    (
        "plateau fed the training loss",
        "SCF802",
        "plateau",
        lambda ls: edit(ls, "plateau", training_value) if in_scope_of_loss(ls) else None,
    ),
    ("plateau mode flipped", "SCF803", "plateau", lambda ls: edit(ls, "plateaumode", flip_mode)),
    ("model.eval() removed", "SCF1002", "evalloop", lambda ls: delete(ls, "eval")),
    ("mean over batches", "SCF1201", "mean", lambda ls: edit(ls, "mean", per_batch)),
    (
        "accumulated loss not divided",
        "SCF1401",
        "backward",
        lambda ls: edit(ls, "divide", undivided),
    ),
    (
        "zero_grad every micro-batch",
        "SCF1402",
        "zero",
        lambda ls: move(ls, "zero", "backward", False) if accumulating(ls) else None,
    ),
    ("step every micro-batch", "SCF1403", "step", step_every_micro_batch),
    ("EMA updated before the step", "SCF302", "ema", lambda ls: move(ls, "ema", "step", False)),
    ("compiled module's state saved", "SCF2401", "save", compiled_saved),
    ("set_epoch removed", "SCF1501", "sampler", lambda ls: delete(ls, "setepoch")),
    ("seed removed", "SCF3101", "built", lambda ls: delete(ls, "seed")),
    ("loader generator removed", "SCF3201", "loader", lambda ls: delete(ls, "generator")),
]


def mutants():
    """(unit, what, code, file and 1-based line to find it at, the unit's files with one of them
    mutated) for every mutation that applies to a file of the corpus and leaves it valid."""
    for unit in UNITS:
        texts = {path.name: path.read_text() for path in unit}
        for path in unit:
            lines = texts[path.name].splitlines(keepends=True)
            for what, code, at, mutate in MUTATIONS:
                step = tagged(lines, "step")
                if code == "SCF301" and step is not None and "closure" in lines[step]:
                    continue  # step(closure) runs the closure's backward first, wherever it is
                mutated = mutate(lines)
                if mutated is None:
                    continue
                # The finding's line may be in another file of the unit (split/).
                files = {**texts, path.name: "".join(mutated)}
                where = [
                    (name, tagged(text.splitlines(keepends=True), at))
                    for name, text in files.items()
                ]
                where = [(name, line) for name, line in where if line is not None]
                if not where:
                    continue
                try:
                    ast.parse(files[path.name])
                except SyntaxError:  # e.g. the only line of a block moved away
                    continue
                name, line = (
                    where[0]
                    if len(where) == 1
                    else next((w for w in where if w[0] == path.name), where[0])
                )
                yield unit_id(unit), what, code, name, line + 1, files


MUTANTS = list(mutants())


def test_every_rule_has_injected_bugs_in_several_styles():
    files = Counter(code for _, _, code, _, _, _ in MUTANTS)
    assert set(files) == set(RULES), set(RULES) - set(files)
    thin = {code: n for code, n in files.items() if n < 3}
    assert not thin, f"rules with fewer than 3 injected bugs: {thin}"


@pytest.fixture(scope="module")
def mutant_results(tmp_path_factory):
    results = []
    for index, (stem, what, code, name, line, files) in enumerate(MUTANTS):
        folder = tmp_path_factory.mktemp(f"{index:03d}_{stem}")
        for file, text in files.items():
            (folder / file).write_text(text)
        # The default rules, and the mutation's own when it is opt-in.
        result = check_paths([str(folder)], select=[*DEFAULT, code])
        assert not result.problems, (stem, what, result.problems)
        found = [(Path(f.path).name, f.line, f.code) for f in result.findings]
        results.append((stem, what, code, (name, line, code), found))
    return results


# Bugs the checker does not see, and why: the test fails when one of them starts being found
# (then delete it here) or when another is missed.
KNOWN_MISSES = {
    ("gan", "step before backward"): "the discriminator steps between its two backward() "
    "calls; which optimizer a backward feeds is dataflow this checker does not follow",
}


def test_injected_bugs_are_found_at_their_line(mutant_results, capsys):
    per_rule = {}
    missed, extra = [], []
    for stem, what, code, expected, found in mutant_results:
        hit = expected in found
        line = f"{expected[0]}:{expected[1]}"
        per_rule.setdefault(code, []).append(hit)
        if not hit and (stem, what) not in KNOWN_MISSES:
            missed.append(f"{stem}: {what}: expected {code} at line {line}, got {found}")
        if hit and (stem, what) in KNOWN_MISSES:
            missed.append(f"{stem}: {what}: now found; remove it from KNOWN_MISSES")
        others = [f for f in found if f != expected]
        if others:
            extra.append(f"{stem}: {what}: also {others}")
    with capsys.disabled():  # the recall table is part of the test's report
        print(f"\nscaffold check recall on {len(mutant_results)} injected bugs:")
        for code in RULES:
            hits = per_rule[code]
            share = f"{sum(hits)}/{len(hits)} ({100 * sum(hits) / len(hits):.0f}%)"
            print(f"  {RULES[code].rule:4} {code:8} {share}")
        for (stem, what), why in KNOWN_MISSES.items():
            print(f"  missed in {stem}: {what}: {why}")
    assert not missed, "\n".join(missed)
    assert not extra, "\n".join(extra)


# --- tricky loops that are correct ---

NEGATIVES = {
    "cosine counted in steps, stepped per batch": """
import torch
def fit(model, loader, epochs):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs * len(loader))
    for _ in range(epochs):
        for x, y in loader:
            opt.zero_grad()
            model(x).sub(y).pow(2).mean().backward()
            opt.step()
            sched.step()
""",
    "plateau stepped through an isinstance test": """
import torch
def end_of_epoch(scheduler, val_loss):
    if isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
        scheduler.step(val_loss)
    else:
        scheduler.step()
def build(opt, plateau):
    if plateau:
        return torch.optim.lr_scheduler.ReduceLROnPlateau(opt)
    return torch.optim.lr_scheduler.StepLR(opt, 10)
scheduler = build(None, True)
""",
    "evaluate() puts the model back in training mode": """
import torch
@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    out = [model(x) for x in loader]
    model.train()
    return out
def fit(model, opt, loader, epochs):
    for _ in range(epochs):
        for x in loader:
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
        evaluate(model, loader)
""",
    "validation function called only under no_grad": """
import torch
def validate(model, loader):
    model.eval()
    return sum(model(x).sum().item() for x in loader)
def main(model, loader):
    with torch.no_grad():
        return validate(model, loader)
""",
    "a pytest test named test_*, not an evaluation": """
def test_forward_shapes(model, batches):
    model.eval()
    for x in batches:
        assert model(x).shape[0] == len(x)
""",
    "moved to the CPU for export after training": """
import torch
def main(model, loader):
    model.cuda()
    optimizer = torch.optim.Adam(model.parameters())
    for x in loader:
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()
    model.half().cpu()
    torch.save(model.state_dict(), "m.pt")
""",
    "weights_only=False written out, and **kwargs": """
import torch
def load(path, **kwargs):
    trusted = torch.load(path, weights_only=False)
    return trusted, torch.load(path, **kwargs)
""",
    "loss read as a number, or detached, before it is kept": """
import torch
def fit(model, opt, loader):
    losses, total = [], 0.0
    for x in loader:
        opt.zero_grad()
        loss = model(x).sum()
        loss.backward()
        opt.step()
        losses.append(loss.detach())
        total += loss.item()
        loss = loss.item()
        total = total + loss
    return losses, total
""",
    "an env.step() and a scheduler named warmup are no optimizer": """
def rollout(env, policy, opt, warmup):
    obs = env.reset()
    for _ in range(100):
        obs, reward, done, info = env.step(policy(obs))
        warmup.step()
""",
}


NEGATIVES.update(
    {
        "R6: the scaler on where autocast is float16 only, and backward outside autocast": """
import torch
def fit(model, opt, loader):
    scaler = torch.amp.GradScaler("cuda")
    for x in loader:
        opt.zero_grad()
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x).sum()
        with torch.autocast("cuda", enabled=False):
            scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
""",
        "R7: an epoch scheduler stepped at the start of every epoch but the first": """
import torch
def fit(model, loader, epochs):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, 10)
    for epoch in range(epochs):
        if epoch > 0:
            sched.step()
        for x in loader:
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
""",
        "R8: a plateau on the validation accuracy in max mode, in a function named train": """
import torch
def train(model, opt, loader, val_loader, epochs):
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="max")
    for _ in range(epochs):
        for x in loader:
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            val_accuracy = sum(float(model(x).mean()) for x in val_loader)
        model.train()
        sched.step(val_accuracy)
""",
        "R10: eval mode set through a helper before evaluating": """
import torch
def freeze(model):
    model.eval()
@torch.no_grad()
def evaluate(model, loader):
    freeze(model)
    return [model(x) for x in loader]
def fit(model, opt, loader, epochs):
    for _ in range(epochs):
        model.train()
        for x in loader:
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
        evaluate(model, loader)
""",
        "R10: a helper named like the model, called in training and in validation": """
import torch
def model_inputs(batch):
    return batch["x"]
def fit(model, opt, loader, val_loader, epochs):
    for _ in range(epochs):
        model.train()
        for batch in loader:
            opt.zero_grad()
            model(model_inputs(batch)).sum().backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            sizes = [len(model_inputs(batch)) for batch in val_loader]
    return sizes
""",
        "R14: accumulation with the loss divided inside its helper": """
import torch
def micro_loss(model, x, k):
    return model(x).sum() / k
def fit(model, opt, loader, k=4):
    for i, x in enumerate(loader):
        loss = micro_loss(model, x, k)
        loss.backward()
        if (i + 1) % k == 0:
            opt.step()
            opt.zero_grad()
""",
        "R15: a validation DistributedSampler that does not shuffle": """
import torch
from torch.utils.data import DataLoader, DistributedSampler
def val_loader(dataset):
    return DataLoader(dataset, sampler=DistributedSampler(dataset, shuffle=False))
""",
        "S1: seeded by the caller before it calls main, with a library's seed_everything": """
import lightning as L
import torch
def main(loader):
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x in loader:
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
if __name__ == "__main__":
    L.seed_everything(0)
    main([torch.ones(2)])
""",
        "S2 and R12: no workers, a generator in **kwargs, a mean over samples": """
import torch
from torch.utils.data import DataLoader
def loaders(dataset, **kwargs):
    return DataLoader(dataset, shuffle=True), DataLoader(dataset, num_workers=4, **kwargs)
def validate(model, loader):
    total = 0.0
    with torch.no_grad():
        for x, y in loader:
            total += float((model(x) - y).pow(2).sum())
    return total / len(loader.dataset)
""",
    }
)


@pytest.mark.parametrize("name", NEGATIVES)
def test_tricky_correct_code_has_no_finding(name, tmp_path):
    path = tmp_path / "loop.py"
    path.write_text(NEGATIVES[name])
    # Every rule for the opt-in rules' cases; the older cases do not seed (S1, opt-in).
    select = ["ALL"] if name.startswith(("S1", "S2")) else ()
    result = check_paths([str(path)], select=select)
    assert not result.problems, result.problems
    assert [(f.line, f.code) for f in result.findings] == []


# Issue 25: each cause of a false alarm or a miss seen on real repositories, as a pair made
# from one template: {x} is the correct code's piece (first) or the bug's (second). The correct
# one must give no finding with the default rules, the buggy one its code.
REAL_WORLD = {
    "a project decorator wrapping inference_mode (yolov5)": (
        """
import torch
def smart_inference_mode():
    def decorate(fn):
        return torch.inference_mode()(fn)
    return decorate
{x}
def run(model, loader):
    model.eval()
    return [model(x) for x, _ in loader]
""",
        ("@smart_inference_mode()", ""),
        "SCF1001",
    ),
    "a helper under no_grad in another function (DINO, guided-diffusion)": (
        """
import torch
{x}
def extract_features(images, model):
    return model(images)
def main(model, blocks):
    model.eval()
    feats = []
    for block in blocks:
        feats.append(extract_features(block, model))
    return feats
""",
        ("@torch.no_grad()", ""),
        "SCF1001",
    ),
    "a half().float() round trip vs a layer replaced after the optimizer (yolov5)": (
        """
import torch
def fit(model, loader):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    {x}
    for x, y in loader:
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()
""",
        ("model.half().float()", "model.fc = torch.nn.Linear(4, 2)"),
        "SCF101",
    ),
    "a partial p.grad = None does not hide a missing zero_grad (DINO)": (
        """
import torch
def cancel_last_layer(model):
    for n, p in model.named_parameters():
        if "last_layer" in n:
            p.grad = None
def fit(model, optimizer, loader):
    for x, y in loader:
        {x}
        model(x).sum().backward()
        cancel_last_layer(model)
        optimizer.step()
""",
        ("optimizer.zero_grad()", "pass"),
        "SCF202",
    ),
    "cast() around a scaled loss (ignite)": (
        """
import torch
from typing import cast
def fit(model, optimizer, loader):
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        optimizer.zero_grad()
        loss = model(x).sum()
        cast(torch.Tensor, {x}).backward()
        scaler.step(optimizer)
        scaler.update()
""",
        ("scaler.scale(loss)", "loss"),
        "SCF503",
    ),
    "StepLR counted in iterations through a local name (ignite)": (
        """
import torch
def fit(model, optimizer, loader, config):
    le = {x}
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=le, gamma=0.9)
    for epoch in range(10):
        for x, y in loader:
            optimizer.zero_grad()
            model(x).sum().backward()
            optimizer.step()
            scheduler.step()
""",
        ('config["num_iters_per_epoch"]', "30"),
        "SCF701",
    ),
    "set_epoch tied to the loop's own sampler": (
        """
import torch
from torch.utils.data import DataLoader, DistributedSampler
def fit(model, optimizer, train_set, val_set, epochs):
    train_sampler = DistributedSampler(train_set)
    val_sampler = DistributedSampler(val_set, shuffle=True)
    loader = DataLoader(train_set, sampler=train_sampler)
    for epoch in range(epochs):
        {x}.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            model(x).sum().backward()
            optimizer.step()
""",
        ("train_sampler", "val_sampler"),
        "SCF1501",
    ),
    "a plateau scheduler fed the running training loss": (
        """
import torch
def fit(model, optimizer, loader, val_loader, epochs):
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
    for epoch in range(epochs):
        model.train()
        running_loss = 0.0
        for x, y in loader:
            optimizer.zero_grad()
            loss = model(x).sum()
            loss.backward()
            optimizer.step()
            running_loss += loss.item()
        model.eval()
        with torch.no_grad():
            val_loss = sum(model(x).sum().item() for x, _ in val_loader)
        scheduler.step({x})
""",
        ("val_loss", "running_loss"),
        "SCF802",
    ),
    "a loss expression kept without a name": (
        """
import torch
import torch.nn.functional as F
def fit(model, optimizer, loader):
    total = 0
    for x, y in loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        total += {x}
    return total
""",
        ("F.cross_entropy(model(x), y).item()", "F.cross_entropy(model(x), y)"),
        "SCF1101",
    ),
    "a predictor whose model is never put in eval mode": (
        """
import torch
class Predictor:
    def __init__(self, path):
        self.model = Net()
        self.model.load_state_dict(torch.load(path, weights_only=True))
        {x}
    def run(self, loader):
        outputs = []
        with torch.inference_mode():
            for x in loader:
                outputs.append(self.model(x))
        return outputs
""",
        ("self.model.eval()", "pass"),
        "SCF1002",
    ),
    "an accumulated loss divided in the function that returns it (ignite)": (
        """
import torch
def create_trainer(model, optimizer, criterion, k):
    def forward_pass(x, y):
        return {x}
    def update(i, x, y):
        loss = forward_pass(x, y)
        loss.backward()
        if i % k == 0:
            optimizer.step()
            optimizer.zero_grad()
    return update
def fit(update, loader):
    for i, (x, y) in enumerate(loader):
        update(i, x, y)
""",
        ("criterion(model(x), y) / k", "criterion(model(x), y)"),
        "SCF1401",
    ),
}


@pytest.mark.parametrize("name", list(REAL_WORLD))
def test_real_world_causes_correct_and_buggy(name, tmp_path):
    template, (good, bad), code = REAL_WORLD[name]
    clean = findings_of(template.replace("{x}", good), tmp_path, "good.py")
    assert clean == [], clean
    buggy = findings_of(template.replace("{x}", bad), tmp_path, "bad.py")
    assert code in {c for _, c in buggy}, buggy


# Issue 27: the rules its options make visible. Each pair is one template: {x} is the correct
# code's piece (first) or the bug's (second); the correct one gives no finding with the default
# rules, the buggy one its code.
ISSUE27 = {
    "zero_grad at the top of every micro-batch": (
        """
import torch
def fit(model, opt, loader, k=4):
    for i, (x, y) in enumerate(loader):
{x}
        loss = torch.nn.functional.mse_loss(model(x), y) / k
        loss.backward()
        if (i + 1) % k == 0:
            opt.step()
            opt.zero_grad()
""",
        ("        pass", "        opt.zero_grad()"),
        "SCF1402",
    ),
    "zero_grad every micro-batch after the update (yolov5's condition)": (
        """
import torch
def fit(model, opt, loader, accumulate, nb):
    last_opt_step = -1
    for i, (x, y) in enumerate(loader):
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        if i - last_opt_step >= accumulate:
            opt.step()
            last_opt_step = i
{x}
""",
        ("            model.zero_grad()", "        model.zero_grad()"),
        "SCF1402",
    ),
    "zero_grad in nanoGPT's micro-step loop": (
        """
import torch
def fit(model, optimizer, get_batch, iters, k):
    for it in range(iters):
        for micro_step in range(k):
            x, y = get_batch()
{x}
            loss = model(x, y) / k
            loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
""",
        ("            pass", "            optimizer.zero_grad(set_to_none=True)"),
        "SCF1402",
    ),
    "step every micro-batch, zero_grad every k-th": (
        """
import torch
def fit(model, opt, loader, k=4):
    for i, (x, y) in enumerate(loader):
        loss = torch.nn.functional.mse_loss(model(x), y) / k
        loss.backward()
{x}
        if (i + 1) % k == 0:
            opt.zero_grad()
""",
        ("        if (i + 1) % k == 0:\n            opt.step()", "        opt.step()"),
        "SCF1403",
    ),
    "EMA updated after the step, or before it": (
        """
import torch
def fit(model, ema, opt, loader):
    for x, y in loader:
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        {x}
""",
        ("opt.step()\n        ema.update(model)", "ema.update(model)\n        opt.step()"),
        "SCF302",
    ),
    "AveragedModel.update_parameters after the loss scaler's step (DeiT, MAE)": (
        """
import torch
from torch.optim.swa_utils import AveragedModel
def train_one_epoch(model, criterion, loader, optimizer, loss_scaler):
    averaged = AveragedModel(model)
    for x, y in loader:
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        {x}
""",
        (
            "loss_scaler(loss, optimizer, parameters=model.parameters())\n"
            "        averaged.update_parameters(model)",
            "averaged.update_parameters(model)\n"
            "        loss_scaler(loss, optimizer, parameters=model.parameters())",
        ),
        "SCF302",
    ),
    "a compiled module's state dict saved (nanoGPT's raw_model)": (
        """
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
def main(model, ddp, compile, path):
    if compile:
        unoptimized_model = model
        model = torch.compile(model)
    if ddp:
        model = DDP(model)
    raw_model = model.module if ddp else model
    checkpoint = {"model": {x}.state_dict()}
    torch.save(checkpoint, path)
""",
        ("getattr(raw_model, '_orig_mod', raw_model)", "raw_model"),
        "SCF2401",
    ),
    "a compiled module's state dict saved, the original kept": (
        """
import torch
def main(model, path):
    compiled = torch.compile(model)
    torch.save({x}.state_dict(), path)
""",
        ("model", "compiled"),
        "SCF2401",
    ),
    "a compiled module's state dict saved, unwrapped again": (
        """
import torch
def main(model, path):
    model = torch.compile(model)
    {x}
    torch.save(model.state_dict(), path)
""",
        ("model = model._orig_mod", "pass"),
        "SCF2401",
    ),
    "a warm-up of transformers stepped per update, or per epoch": (
        """
import torch
from transformers import get_linear_schedule_with_warmup
def fit(model, opt, loader, epochs):
    scheduler = get_linear_schedule_with_warmup(opt, 100, epochs * len(loader))
    for epoch in range(epochs):
        for x, y in loader:
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
{x}
""",
        ("            scheduler.step()", "        scheduler.step()"),
        "SCF703",
    ),
    "a LambdaLR warm-up in steps, stepped per update or per epoch": (
        """
import torch
def warmup(step, warmup_steps=500):
    return min(1.0, (step + 1) / warmup_steps)
def fit(model, opt, loader, epochs):
    scheduler = torch.optim.lr_scheduler.LambdaLR(opt, warmup)
    for epoch in range(epochs):
        for x, y in loader:
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
{x}
""",
        ("            scheduler.step()", "        scheduler.step()"),
        "SCF703",
    ),
    "a LinearLR warm-up over optimizer steps, stepped per update or per epoch": (
        """
import torch
def fit(model, opt, loader, epochs, warmup_steps):
    warm = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.01, total_iters=warmup_steps)
    for epoch in range(epochs):
        for x, y in loader:
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
{x}
""",
        ("            warm.step()", "        warm.step()"),
        "SCF703",
    ),
    "transformers' get_scheduler counted in steps, stepped per epoch": (
        """
import torch
from transformers import get_scheduler
def fit(model, opt, loader, epochs):
    scheduler = get_scheduler(
        "cosine", optimizer=opt, num_warmup_steps=100, num_training_steps=epochs * len(loader)
    )
    for epoch in range(epochs):
        for x, y in loader:
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
{x}
""",
        ("            scheduler.step()", "        scheduler.step()"),
        "SCF703",
    ),
}


@pytest.mark.parametrize("name", list(ISSUE27))
def test_issue27_rules_correct_and_buggy(name, tmp_path):
    template, (good, bad), code = ISSUE27[name]
    clean = findings_of(template.replace("{x}", good), tmp_path, "good.py")
    assert clean == [], clean
    buggy = findings_of(template.replace("{x}", bad), tmp_path, "bad.py")
    assert code in {c for _, c in buggy}, buggy


# Correct code, seen in real projects, that looks like one of issue 27's bugs.
ISSUE27_LOOKALIKES = {
    "Accelerate's accumulate(): zero_grad and step written every micro-batch": """
import torch
def fit(accelerator, model, opt, loader):
    for x, y in loader:
        with accelerator.accumulate(model):
            loss = torch.nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            opt.step()
            opt.zero_grad()
""",
    "nanoGPT's micro-steps: backward in an inner loop, one step after it": """
import torch
def fit(model, optimizer, get_batch, iters, gradient_accumulation_steps):
    for it in range(iters):
        for micro_step in range(gradient_accumulation_steps):
            x, y = get_batch()
            loss = model(x, y) / gradient_accumulation_steps
            loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
""",
    "per-task gradients harvested in an inner loop (PCGrad), one step after it": """
import torch
def fit(model, optimizer, loader, tasks):
    for batch in loader:
        grads = []
        for task in tasks:
            optimizer.zero_grad()
            task(model, batch).backward()
            grads.append([p.grad.clone() for p in model.parameters()])
        for p, *gs in zip(model.parameters(), *grads):
            p.grad = sum(gs)
        optimizer.step()
""",
    "a WGAN: every batch trains the critic, every n-th the generator": """
import torch
def fit(netD, netG, loader, n_critic=5):
    optD = torch.optim.RMSprop(netD.parameters(), lr=5e-5)
    optG = torch.optim.RMSprop(netG.parameters(), lr=5e-5)
    for i, (real, z) in enumerate(loader):
        netD.zero_grad()
        lossD = netD(netG(z).detach()).mean() - netD(real).mean()
        lossD.backward()
        optD.step()
        if i % n_critic == 0:
            netG.zero_grad()
            lossG = -netD(netG(z)).mean()
            lossG.backward()
            optG.step()
""",
    "MAE's accumulation through the loss scaler's update_grad": """
import torch
def train_one_epoch(model, loader, optimizer, loss_scaler, accum_iter, model_ema):
    optimizer.zero_grad()
    for step, (x, y) in enumerate(loader):
        loss = torch.nn.functional.cross_entropy(model(x), y) / accum_iter
        loss_scaler(loss, optimizer, parameters=model.parameters(),
                    update_grad=(step + 1) % accum_iter == 0)
        if (step + 1) % accum_iter == 0:
            optimizer.zero_grad()
            model_ema.update(model)
""",
    "an EMA updated per epoch, after the batch loop; a schema updated before the step": """
import torch
def fit(model, ema, schema, opt, loader, epochs):
    for epoch in range(epochs):
        for x, y in loader:
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            schema.update(x)
            opt.step()
        ema.update(model)
""",
    "Module.compile() compiles in place: the keys stay": """
import torch
def main(model, path):
    model.compile()
    torch.save(model.state_dict(), path)
""",
    "a compiled module's state dict copied into another compiled module, not saved": """
import torch
def main(model, other):
    model = torch.compile(model)
    other = torch.compile(other)
    other.load_state_dict(model.state_dict())
""",
    "build-nanogpt: `if a and b:` evaluates only after `if a:` put the model in eval": """
import torch
def fit(model, optimizer, loader, val_batches, examples, steps, use_compile):
    for step in range(steps):
        if step % 250 == 0:
            model.eval()
            with torch.no_grad():
                val = sum(model(x).sum().item() for x in val_batches)
        if step % 250 == 0 and not use_compile:
            hits = 0
            for x in examples:
                with torch.no_grad():
                    hits += int(model(x).argmax() == 0)
        model.train()
        optimizer.zero_grad()
        for x in loader:
            model(x).sum().backward()
        optimizer.step()
""",
    "a moving average of the loss updated before the step; a warm-up factory in epochs": """
import torch
from transformers import get_linear_schedule_with_warmup
def fit(model, opt, loader, epochs, ema_loss, loss_ema):
    scheduler = get_linear_schedule_with_warmup(opt, 1, epochs)
    for epoch in range(epochs):
        for x, y in loader:
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            ema_loss.update(loss.item())
            loss_ema.update(0.9)
            opt.step()
        scheduler.step()
""",
    "a warm-up counted in epochs, stepped per epoch": """
import torch
def fit(model, opt, loader, epochs, warmup_epochs=5):
    warm = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=warmup_epochs)
    decay = torch.optim.lr_scheduler.LambdaLR(opt, lambda epoch: 0.95 ** epoch)
    for epoch in range(epochs):
        for x, y in loader:
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        warm.step()
        decay.step()
""",
}


@pytest.mark.parametrize("name", list(ISSUE27_LOOKALIKES))
def test_issue27_lookalikes_have_no_finding(name, tmp_path):
    assert findings_of(ISSUE27_LOOKALIKES[name], tmp_path) == []


# Issue 25 (2026-12-04): the causes of false alarms on repositories nobody had tuned on. Each
# cause has a correct file in check_corpus/ (test_correct_loops_have_no_finding: no finding)
# and here the bug put into that file in its own style: (file, the bug, the text replaced, its
# replacement, the code expected, the text of the line it is expected at).
UNSEEN_BUGS = [
    (
        "grad_divided",
        "gradients no longer divided after the micro-steps",
        "    for p in model.parameters():\n        p.grad /= accumulation\n",
        "",
        "SCF1401",
        "loss.backward()",
    ),
    (
        "grad_divided",
        "gradients divided by the world size, not by the accumulation count",
        "p.grad /= accumulation",
        "p.grad /= world_size",
        "SCF1401",
        "loss.backward()",
    ),
    (
        "grad_divided",
        "training loss kept as a tensor",
        "train_loss += loss.detach()",
        "train_loss += loss",
        "SCF1101",
        "train_loss += loss",
    ),
    (
        "grad_divided",
        "validation loss summed with autograd on",
        "            with torch.no_grad():\n                _, loss = model(x_val, y_val)\n"
        "                val_loss += loss\n",
        "            _, loss = model(x_val, y_val)\n            val_loss += loss\n",
        "SCF1101",
        "val_loss += loss",
    ),
    (
        "amp_precision_choice",
        "GradScaler built for every amp precision, bfloat16 included",
        'need_scaler = args.precision == "amp"',
        'need_scaler = args.precision.startswith("amp")',
        "SCF602",
        'scaler = torch.amp.GradScaler("cuda")',
    ),
    (
        "amp_precision_choice",
        "the backward helper no longer scales the loss",
        "        scaler.scale(total_loss).backward()",
        "        total_loss.backward()",
        "SCF503",
        "scaler.step(optimizer)",
    ),
    (
        "eval_in_loop",
        "the eval() inside the test loop removed",
        "            model.eval()\n",
        "",
        "SCF1002",
        "for data, target in loader:",
    ),
    (
        "eval_in_loop",
        "the eval() moved after the forward: the first batch runs in training mode",
        "            model.eval()\n            pred = model(data).argmax(1)\n",
        "            pred = model(data).argmax(1)\n            model.eval()\n",
        "SCF1002",
        "for data, target in loader:",
    ),
    (
        "eval_in_loop",
        "train() no longer sets training mode",
        "    model.train()\n",
        "",
        "SCF901",
        "model.eval()",
    ),
    (
        "ddp_wrapper_mode",
        "the module no longer put in eval mode before validating through its wrapper",
        "        model.eval()\n",
        "",
        "SCF1002",
        "for _ in range(val_steps):",
    ),
    (
        "ddp_wrapper_mode",
        "validation through the wrapper with autograd on",
        "            with torch.no_grad():\n"
        "                inputs, targets = val_loader.next_batch()\n"
        "                val_loss += ddp_model(inputs, targets)\n",
        "            inputs, targets = val_loader.next_batch()\n"
        "            val_loss += ddp_model(inputs, targets).item()\n",
        "SCF1001",
        "for _ in range(val_steps):",
    ),
    (
        "optional_encoder",
        "the optional encoder no longer put in eval mode",
        "    if encoder is not None:\n        encoder.eval()\n",
        "",
        "SCF1002",
        "for imgs, caps in loader:",
    ),
    (
        "optional_encoder",
        "the decoder no longer put in eval mode",
        "    decoder.eval()\n",
        "",
        "SCF1002",
        "for imgs, caps in loader:",
    ),
    (
        "optional_encoder",
        "train() no longer sets the decoder's training mode",
        "    decoder.train()\n",
        "",
        "SCF901",
        "decoder.eval()",
    ),
    (
        "model_views",
        "the test helper no longer decorated @torch.no_grad()",
        "@torch.no_grad()\ndef perform_test",
        "def perform_test",
        "SCF1001",
        "for inputs, labels in loader:",
    ),
    (
        "model_views",
        "an evaluation with autograd on added to the loop over views",
        "        results.append(perform_test(loader, model))\n",
        "        results.append(perform_test(loader, model))\n"
        "        results.append([model(x) for x, _ in loader])\n",
        "SCF1001",
        "for views in cfg.views:",
    ),
    (
        "model_views",
        "the profiled forward no longer under the FLOP counter",
        "    with counter:\n        model(inputs)\n",
        "    model(inputs)\n",
        "SCF1001",
        "while retries:",
    ),
    (
        "nan_skip",
        "clipping before backward",
        "        loss.backward()\n"
        "        grad_norm = clip_grad_norm_(model.parameters(), grad_clip)\n",
        "        grad_norm = clip_grad_norm_(model.parameters(), grad_clip)\n"
        "        loss.backward()\n",
        "SCF401",
        "grad_norm = clip_grad_norm_(model.parameters(), grad_clip)",
    ),
    (
        "nan_skip",
        "clipping after zero_grad",
        "        optimizer.zero_grad()\n        losses.append(loss.item())\n",
        "        optimizer.zero_grad()\n"
        "        clip_grad_norm_(model.parameters(), grad_clip)\n"
        "        losses.append(loss.item())\n",
        "SCF401",
        "clip_grad_norm_(model.parameters(), grad_clip)",
    ),
    (
        "nan_skip",
        "zero_grad removed",
        "        optimizer.zero_grad()\n",
        "",
        "SCF202",
        "optimizer.step()",
    ),
    (
        "step_factory",
        "the caller no longer zeroes before the returned step",
        "        state.optimizer.zero_grad()\n",
        "",
        "SCF202",
        "optimizer.step()",
    ),
    (
        "step_factory",
        "clipping after the step inside the closure",
        "        torch.nn.utils.clip_grad_norm_(params, clip)\n        optimizer.step()\n",
        "        optimizer.step()\n        torch.nn.utils.clip_grad_norm_(params, clip)\n",
        "SCF401",
        "torch.nn.utils.clip_grad_norm_(params, clip)",
    ),
    (
        "step_factory",
        "zero_grad moved between backward and step",
        "        loss.backward()\n",
        "        loss.backward()\n        optimizer.zero_grad()\n",
        "SCF201",
        "optimizer.zero_grad()",
    ),
    (
        "generator_override",
        "the base class's generate() no longer under no_grad",
        "    @torch.no_grad()\n",
        "",
        "SCF1001",
        "for _ in range(self.max_len):",
    ),
    # 2026-12-04, second set: the causes found on 13 more repositories, and the miss of a
    # top-level step loop that validates
    (
        "flag_skipped_backward",
        "clipping after the step",
        "    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)\n"
        "    optimizer.step()\n",
        "    optimizer.step()\n"
        "    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)\n",
        "SCF401",
        "norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)",
    ),
    (
        "flag_skipped_backward",
        "clipping before the backward it should follow, in the micro-step loop",
        "        if not args.inference_only:\n",
        "        torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)\n"
        "        if not args.inference_only:\n",
        "SCF401",
        "torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)",
    ),
    (
        "flag_skipped_backward",
        "zero_grad removed",
        "    optimizer.zero_grad(set_to_none=True)\n",
        "",
        "SCF202",
        "optimizer.step()",
    ),
    (
        "iteration_counted",
        "a StepLR whose length names epochs, stepped every batch",
        "step_size=opts.step_size",
        "step_size=opts.lr_decay_epochs",
        "SCF701",
        "scheduler.step()",
    ),
    (
        "iteration_counted",
        "the run ends on a count of epochs, the StepLR still stepped every batch",
        "            if cur_itrs >= opts.total_itrs:\n",
        "            if cur_epochs >= opts.epochs:\n",
        "SCF701",
        "scheduler.step()",
    ),
    (
        "iteration_counted",
        "an epoch loop around the batch loop that also stops on an iteration count",
        "    while True:\n",
        "    for _epoch in range(opts.epochs):\n",
        "SCF701",
        "scheduler.step()",
    ),
    (
        "frozen_generator",
        "the generator built trainable, its averaged copy sampled with autograd on",
        "G = Generator().train().requires_grad_(False).to(device)",
        "G = Generator().train().to(device)",
        "SCF1001",
        "images = torch.cat([G_ema(z).cpu() for z in grid_z])",
    ),
    (
        "frozen_generator",
        "the averaged copy unfrozen",
        "    G_ema = copy.deepcopy(G).eval()\n",
        "    G_ema = copy.deepcopy(G).eval()\n    G_ema.requires_grad_(True)\n",
        "SCF1001",
        "images = torch.cat([G_ema(z).cpu() for z in grid_z])",
    ),
    (
        "frozen_generator",
        "the metric's sampler frozen only under a flag",
        "    sampler.eval().requires_grad_(False).to(device)\n    if jit:\n",
        "    sampler.eval().to(device)\n    if jit:\n        sampler.requires_grad_(False)\n",
        "SCF1001",
        "for _ in range(0, num_samples, batch_size):",
    ),
    (
        "step_loop_validation",
        "model.train() dropped after validating in the step loop",
        "        model.train()\n",
        "",
        "SCF901",
        "model.eval()",
    ),
    (
        "ddp_wrapper_mode",
        "model.train() dropped after validating through the wrapper in the step loop",
        "    model.train()\n",
        "",
        "SCF901",
        "model.eval()",
    ),
    (
        "probe_steps",
        "the validation helper no longer puts the trained head back in training mode",
        "    head.train()\n",
        "",
        "SCF901",
        "head.eval()",
    ),
    (
        "probe_steps",
        "the model moved back after validating, not put back in training mode",
        "            model.to(device).train()\n",
        "            model.to(device)\n",
        "SCF901",
        "model.cpu().eval()",
    ),
]


@pytest.mark.parametrize(
    "stem, what, old, new, code, text", UNSEEN_BUGS, ids=[f"{s}: {w}" for s, w, *_ in UNSEEN_BUGS]
)
def test_unseen_causes_bug_injected_is_found_at_its_line(
    stem, what, old, new, code, text, tmp_path
):
    source = (CORPUS / f"{stem}.py").read_text()
    assert source.count(old) == 1, (stem, old)
    buggy = source.replace(old, new)
    lines = buggy.splitlines()
    found = findings_of(buggy, tmp_path, f"{stem}.py")
    at = {line for line, c in found if c == code}
    assert any(lines[line - 1].strip() == text for line in at), (what, found)


def test_model_named_eval_call_without_a_name_is_no_internal_error(tmp_path):
    # yolov5 ModelEMA: `self.ema = deepcopy(model).eval()`, then a loop over its parameters
    text = """
import torch
from copy import deepcopy
class ModelEMA:
    def __init__(self, model):
        self.ema = deepcopy(model).eval()
        print(deepcopy(model).eval())
        for p in self.ema.parameters():
            p.requires_grad_(False)
"""
    assert findings_of(text, tmp_path) == []


def test_a_check_that_fails_is_one_line_and_the_others_still_run(tmp_path, monkeypatch):
    from scaffold.check import checks

    def broken(module):
        raise ValueError("boom")
        yield

    monkeypatch.setattr(checks, "CHECKS", ((broken, ("SCF2301",)), *checks.CHECKS[:-3]))
    (tmp_path / "loop.py").write_text(BUGGY)
    result = invoke(str(tmp_path))
    assert result.exit_code == 2
    assert "SCF201" in result.stdout  # the other checks still ran
    errors = [line for line in result.stderr.splitlines() if "internal error" in line]
    assert len(errors) == 1 and "broken: ValueError('boom')" in errors[0], result.stderr


# --- every project scaffold generates checks clean ---


def test_examples_are_clean():
    result = check_paths([str(REPO / "examples")], select=["ALL"])
    assert result.files > 50 and not result.problems
    assert [f"{f.path}:{f.line}: {f.code}" for f in result.findings] == []


@pytest.mark.parametrize("options", COVERING, ids=combo_id)
def test_generated_projects_are_clean(options, render_combo):
    project = render_combo(options).dest
    result = check_paths([str(project / "src"), str(project / "tests")], select=["ALL"])
    assert result.files > 10 and not result.problems
    assert [f"{f.path}:{f.line}: {f.code}" for f in result.findings] == []


# The mutation suite's bugs (tests/mutants.py) that scaffold check must find in a generated
# project (its src/ checked as one project, every rule selected), by the code it must report.
# The others are out of reach of a static check of the loop: R13 (which weights are kept is a
# value), the validation metrics' per-batch mean (R12 inside a class's add()), the data rules
# (D2, D5, D6: values in data code), S2 in the streamed workers (seed arithmetic) and the
# distributed rules M1-M8 (sharding and reduction arithmetic).
# "optimizer built before model.to(device)" is left out: since torch 2.0 Module.to() keeps each
# Parameter object, so the optimizer still updates the model's parameters and SCF101 no longer
# reports an in-place move (it reports a parameter replaced; see optimizer_before_move).
ENGINE_MUTANTS = {
    "zero_grad after backward": "SCF201",
    "zero_grad never called": "SCF202",
    "optimizer.step before backward": "SCF301",
    "scaler.step before backward": "SCF301",
    "clipping before backward": "SCF401",
    "clipping after scaler.step": "SCF401",
    "clipping after optimizer.step": "SCF401",
    "clipping without unscale_": "SCF501",
    "optimizer.step bypasses the scaler": "SCF502",
    "backward on the unscaled loss": "SCF503",
    "scaler.update never called": "SCF504",
    "backward inside autocast": "SCF601",
    "GradScaler on with bf16": "SCF602",
    "cosine scheduler stepped every batch": "SCF701",
    "cosine scheduler stepped before the epoch's updates": "SCF702",
    "plateau step without the metric": "SCF801",
    "plateau stepped with the training loss": "SCF802",
    "plateau mode max for a loss": "SCF803",
    "model.train never called": "SCF901",
    "validation without no_grad": "SCF1001",
    "validation without model.eval": "SCF1002",
    "loss tensor kept with its graph": "SCF1101",
    "nothing seeded": "SCF3101",
    "EMA updated before the optimizer step": "SCF302",
    "EMA updated before the scaler's step": "SCF302",
    "loss not weighted by the batch's share of the window": "SCF1401",
    "zero_grad every batch": "SCF1402",
    # The step moved into the window's inner loop, where no zero_grad runs between steps: seen
    # as that loop's missing zero_grad (SCF1403 wants the k-th-batch step of a flat loop).
    "optimizer step every batch": "SCF202",
}
# Found in some combinations only: the code expected, and the combinations out of its reach.
PARTLY = {
    # The distributed combinations reduce the per-step losses across processes first: the
    # per-batch mean is then a sum over a stacked tensor, no mean() or len() to read. The
    # accumulating loop (grad_accum > 1) appends a window's loss, summed over its batches in an
    # inner loop, which the check does not trace back to the loss.
    "training loss averaged per batch": ("SCF1201", lambda o: o.distributed or o.grad_accum > 1),
}


@pytest.mark.proof
def test_mutation_suite_bugs_in_generated_projects(render_combo, tmp_path, capsys):
    from tests.mutants import MUTANTS, MutationError, apply_edit

    assert set(ENGINE_MUTANTS) <= {m.bug for m in MUTANTS}, "tests/mutants.py renamed a bug"
    outcomes, missed = {}, []
    for index, options in enumerate(COVERING):
        package = render_combo(options).dest / "src"
        # Each file of the package parsed once; a mutant re-parses only the file it edits
        # (written to a scratch file, read back under its own path), and the package is checked
        # in process as one project, as `scaffold check src` reads it.
        sources = {str(p): read_source(str(p)) for p in sorted(package.rglob("*.py"))}
        for mutant in (m for m in MUTANTS if m.applies(options)):
            (target,) = package.glob(f"*/{mutant.file}")
            scratch = tmp_path / f"{index}-{mutant.slug}.py"
            scratch.write_text(target.read_text())
            try:
                for edit in mutant.edits:
                    apply_edit(scratch, edit)
            except MutationError:
                continue  # not in this combination's code
            mutated = read_source(str(scratch))
            mutated.path = str(target)
            files = [mutated if path == str(target) else src for path, src in sources.items()]
            problems = []
            found = check_sources(files, select=["ALL"], problems=problems)
            assert not problems, problems
            codes = {f.code for f in found}
            expected = ENGINE_MUTANTS.get(mutant.bug) or PARTLY.get(mutant.bug, (None,))[0]
            found = expected in codes if expected else bool(codes)
            outcomes.setdefault((mutant.rule, mutant.bug), []).append(found)
            if mutant.bug in PARTLY and PARTLY[mutant.bug][1](options):
                continue
            if expected and not found:
                missed.append(f"{combo_id(options)}: {mutant.bug}: {sorted(codes)}")
    with capsys.disabled():
        print("\nscaffold check on the mutation suite's bugs in generated projects:")
        for (rule, bug), hits in outcomes.items():
            reach = "" if bug in ENGINE_MUTANTS else "  (not expected: see ENGINE_MUTANTS)"
            reach = "  (some combinations: see PARTLY)" if bug in PARTLY else reach
            print(f"  {rule:4} {sum(hits)}/{len(hits)} {bug}{reach}")
    assert not missed, "\n".join(missed)
    assert set(ENGINE_MUTANTS) <= {bug for _, bug in outcomes}, "a listed bug never applied"


# --- the command: formats, exit codes, suppression, selection, bad paths ---

BUGGY = """import torch

def fit(model, opt, loader):
    for x in loader:
        loss = model(x).sum()
        loss.backward()
        opt.zero_grad()
        opt.step()
    return torch.load("m.pt")
"""


def invoke(*args):
    return runner.invoke(cli.app, ["check", *args])


def test_text_output_is_one_line_a_finding_and_exit_1(tmp_path):
    (tmp_path / "loop.py").write_text(BUGGY)
    result = invoke(str(tmp_path))
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"{tmp_path / 'loop.py'}:7:9: SCF201 zero_grad() between")
    assert lines[0].endswith("(R2)")
    assert lines[1].startswith(f"{tmp_path / 'loop.py'}:9:12: SCF2301 ")
    assert lines[2] == "2 findings in 1 file"


def test_clean_code_exits_0(tmp_path):
    (tmp_path / "ok.py").write_text("import torch\nx = torch.load('m.pt', weights_only=True)\n")
    result = invoke(str(tmp_path / "ok.py"))
    assert result.exit_code == 0, result.output
    assert result.stdout == "0 findings in 1 file\n"


def test_json_and_github_formats(tmp_path):
    path = tmp_path / "loop.py"
    path.write_text(BUGGY)
    result = invoke("--format", "json", str(path))
    assert result.exit_code == 1
    first = json.loads(result.stdout)[0]
    assert first["code"] == "SCF201" and first["rule"] == "R2"
    assert (first["path"], first["line"], first["column"]) == (str(path), 7, 9)
    assert first["message"] and first["fix"]
    result = invoke("--format", "github", str(path))
    line = result.stdout.splitlines()[0]
    assert line.startswith(f"::error title=scaffold check SCF201,file={path},line=7,col=9::")
    clean = tmp_path / "clean.py"
    clean.write_text("x = 1\n")
    assert json.loads(invoke("--format", "json", str(clean)).stdout) == []


def test_noqa_silences_its_codes_or_all(tmp_path):
    path = tmp_path / "loop.py"
    path.write_text(BUGGY.replace("opt.zero_grad()", "opt.zero_grad()  # noqa: SCF201"))
    assert [f.code for f in check_paths([str(path)]).findings] == ["SCF2301"]
    path.write_text(BUGGY.replace("opt.zero_grad()", "opt.zero_grad()  # noqa: E501"))
    assert [f.code for f in check_paths([str(path)]).findings] == ["SCF201", "SCF2301"]
    path.write_text(BUGGY.replace('"m.pt")', '"m.pt")  # type: ignore  # noqa'))
    assert [f.code for f in check_paths([str(path)]).findings] == ["SCF201"]
    assert noqa_lines("x = 1  # NOQA:scf201,SCF4\n") == {1: ["SCF201", "SCF4"]}


def test_select_and_ignore_take_codes_and_rules(tmp_path):
    path = tmp_path / "loop.py"
    path.write_text(BUGGY)
    assert [f.code for f in check_paths([str(path)], select=["R2"]).findings] == ["SCF201"]
    assert [f.code for f in check_paths([str(path)], ignore=["SCF201"]).findings] == ["SCF2301"]
    result = invoke("--select", "SCF201,C3", "--ignore", "C3", str(path))
    assert result.exit_code == 1 and "SCF2301" not in result.stdout
    result = invoke("--select", "SCF999", str(path))
    assert result.exit_code == 2
    assert result.stderr == "error: no check is named 'SCF999'; codes look like SCF201, rules R2\n"


def test_bad_paths_are_one_line_each_and_the_rest_is_checked(tmp_path):
    (tmp_path / "loop.py").write_text(BUGGY)
    (tmp_path / "broken.py").write_text("def f(:\n")
    (tmp_path / "latin.py").write_bytes(b"x = '\xe9'\n")
    (tmp_path / "notes.txt").write_text("not python")
    result = invoke(str(tmp_path), str(tmp_path / "notes.txt"), str(tmp_path / "gone.py"))
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"error: {tmp_path / 'broken.py'}:1:7: syntax error: invalid syntax",
        f"error: {tmp_path / 'latin.py'}: not UTF-8, and no coding comment names another",
        f"error: {tmp_path / 'notes.txt'}: not a Python file (.py)",
        f"error: {tmp_path / 'gone.py'}: no such file or folder",
    ]
    assert "SCF201" in result.stdout and "2 findings in 1 file" in result.stdout
    assert invoke().exit_code == 2  # no path at all


# Deep nesting in each form an expression takes: a chain of unary operators, of binary ones
# (nested on the left), of brackets and of calls. Python's own parser gives up on some of these
# (a RecursionError, a MemoryError or "too many nested parentheses"), and then check must too,
# in one line; where Python parses the file, the findings in it are still reported.
NESTINGS = {
    "unary": lambda n: "-" * n + "loss",
    "binary": lambda n: "+".join(["loss"] * n),
    "brackets": lambda n: "[" * n + "loss" + "]" * n,
    "calls": lambda n: "f(" * n + "loss" + ")" * n,
}


@pytest.mark.parametrize("form", NESTINGS)
@pytest.mark.parametrize("depth", [50, 180, 900, 5000, 30000])
def test_deeply_nested_code_is_checked_or_refused_in_one_line(tmp_path, form, depth):
    line = "        total = " + NESTINGS[form](depth) + "\n"
    text = BUGGY.replace("        loss.backward()\n", line + "        loss.backward()\n")
    (tmp_path / "deep.py").write_text(text)
    (tmp_path / "loop.py").write_text(BUGGY)
    try:
        compile(text, "deep.py", "exec")
        parses = True
    except (SyntaxError, RecursionError, MemoryError):
        parses = False
    result = invoke(str(tmp_path))
    assert "Traceback" not in result.output
    deep = [line for line in result.stdout.splitlines() if "deep.py" in line]
    assert [line for line in result.stdout.splitlines() if "loop.py:" in line]  # still checked
    if parses:
        assert result.exit_code == 1 and result.stderr == ""
        assert any("SCF201" in line for line in deep), result.stdout  # its bug is still found
    else:
        assert result.exit_code == 2 and deep == []
        [error] = result.stderr.splitlines()
        assert error.startswith(f"error: {tmp_path / 'deep.py'}"), error
        assert re.search(r"too deeply for Python's parser|too many nested parentheses", error)


def test_hidden_and_environment_folders_are_skipped(tmp_path):
    for folder in (".venv", "venv", "__pycache__", ".git"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "loop.py").write_text(BUGGY)
    assert check_paths([str(tmp_path)]).files == 0


def test_check_imports_no_torch(tmp_path):
    (tmp_path / "loop.py").write_text(BUGGY)
    code = (
        "import sys; from scaffold.check.run import check_paths; "
        f"r = check_paths([{str(tmp_path)!r}]); "
        "assert r.findings and 'torch' not in sys.modules, sorted(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, timeout=60)
