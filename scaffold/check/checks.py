"""The checks: each reads one file's training steps or calls and yields (node, code) pairs.

Out of reach statically: what values decide at run time (a GradScaler built with
enabled=flag is taken as on; `if step % k == 0` is read as either branch, never as a count;
a dtype, a patience or a scheduler mode read from a config file), which optimizer a backward()
feeds when two models share one loss graph (a GAN's step moved between its discriminator's two
backward() calls is not seen), and objects reached through containers, getattr or dynamic
dispatch. Within reach but not built yet: helpers imported from another checked file (they are
opaque, so a loop split between train.py and engine.py is checked file by file), R6
(backward or step inside autocast), R7's per-step schedules stepped per epoch, R8 with a
training-set value, R10's missing model.eval(), R12, R14, R15 and seeding (S1, S2).
"""

import ast

from scaffold.check.flow import (
    BACKWARD,
    CLIP,
    EPOCH_SCHEDULERS,
    EVAL_MODE,
    MOVES,
    OPTIMIZERS,
    PASS,
    PLATEAU,
    SCHED_STEP,
    STEP,
    TRAIN_MODE,
    UNSCALE,
    UPDATE,
    ZERO,
    Module,
    dotted,
    last_name,
)
from scaffold.check.project import Project

COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
# Names of functions that evaluate a model; `test_*` is left out: those are pytest's.
EVAL_NAMES = ("validat", "evaluat", "eval", "val_", "valid_")
EVAL_EXACT = {"test", "test_epoch", "test_loop", "run_test", "val", "valid", "validation"}
EVAL_ENDINGS = ("_eval", "_evaluate", "_evaluation", "_validation", "_validate", "_val", "_test")
# Reading a tensor into Python, or cutting it from its graph, frees the graph (R11).
SAFE_READS = {"item", "detach", "tolist", "numpy", "data"}
SAFE_CALLS = {"float", "int", "bool", "str", "repr", "len", "round"}


def check_tree(tree: ast.Module) -> list[tuple[ast.AST, str]]:
    """Every finding of one parsed file on its own, as (node, code) pairs in source order."""
    project = Project()
    project.add(tree)
    project.finish()
    return [(node, code) for _, node, code in check_project(project)]


def check_project(project: Project) -> list[tuple[Module, ast.AST, str]]:
    """Every finding in the project's files, as (file, node, code), once each. A finding in a
    helper is reported in the helper's file, whichever file's loop called it."""
    found = {}
    for module in project.modules:
        for check in CHECKS:
            for node, code in check(module):
                home = project.module_at(node)
                key = (project.modules.index(home), node.lineno, node.col_offset, code)
                found.setdefault(key, (home, node, code))
    return [found[key] for key in sorted(found)]


def step_order(module: Module):
    """R2-R5: zero_grad, backward, unscale_, clipping and step in one training step."""
    for unit in module.steps():
        events = [e for path in unit.paths for e in path.events]
        zeroed = {e.key for e in events if e.kind == ZERO}
        for event in events:
            if event.kind == STEP and not _zeroed(module, event.key, zeroed):
                yield event.node, "SCF202"
                break
        if not any(e.kind == UPDATE for e in events):
            for event in events:
                if event.kind == STEP and event.scaled:
                    yield event.node, "SCF504"
                    break
        for path in unit.paths:
            yield from _path_order([e for e in path.events if e.kind != PASS])


def _zeroed(module: Module, optimizer: str | None, zeroed: set) -> bool:
    """Whether a step's gradients are cleared: by its optimizer, by the model it was built
    from, or by a zero_grad whose owner this file cannot tell apart."""
    if not zeroed:
        return False
    models = {
        model
        for call in module.constructors.get(optimizer or "", ())
        for model in _optimizer_models(module, call)
    }
    if not models:
        return True  # an optimizer built elsewhere: any zero_grad may be its own
    known = set(module.constructors) | {
        model for calls in module.constructors.values() for c in calls
        for model in _optimizer_models(module, c)
    }  # fmt: skip
    return bool(zeroed & (models | {optimizer})) or bool(zeroed - known)


def _path_order(events: list):
    """R2-R5 along one path through a step. A misplaced zero_grad or step is reported once:
    the clipping it leaves out of place is the same bug, not a second one."""

    def last(kinds, before, skip=()):
        found = (e for e in reversed(events[:before]) if e.kind in kinds and e not in skip)
        return next(found, None)

    def first(kinds, after, skip=()):
        return next((e for e in events[after + 1 :] if e.kind in kinds and e not in skip), None)

    def kind(event):
        return event.kind if event is not None else None

    misplaced = []  # zero_grads between backward and step, steps before backward
    for i, event in enumerate(events):
        if event.kind == ZERO:
            if (
                kind(last({BACKWARD, STEP}, i)) == BACKWARD
                and kind(first({BACKWARD, STEP}, i)) == STEP
            ):
                misplaced.append(event)
                yield event.node, "SCF201"
        elif event.kind == STEP:
            if not event.closure and last({BACKWARD}, i) is None and first({BACKWARD}, i):
                misplaced.append(event)
                yield event.node, "SCF301"
            backward = last({BACKWARD}, i)
            if not event.scaled and backward is not None and backward.scaled:
                yield event.node, "SCF502"
            if event.scaled and backward is not None and not backward.scaled:
                yield event.node, "SCF503"
    for i, event in enumerate(events):
        if event.kind != CLIP:
            continue
        order = {BACKWARD, STEP, ZERO}
        before = kind(last(order, i, misplaced))
        after = kind(first(order, i, misplaced))
        if any(e.kind == STEP and e in misplaced for e in events[:i]):
            after = None  # a step moved before backward: the clip's window is that bug's
        if (
            before in (STEP, ZERO)
            or (before is None and after in (BACKWARD, ZERO))
            or (before == BACKWARD and after == ZERO)
        ):
            yield event.node, "SCF401"
            continue
        backward = last({BACKWARD}, i)
        if backward is not None and backward.scaled:
            start = events.index(backward)
            if not any(e.kind == UNSCALE for e in events[start:i]):
                yield event.node, "SCF501"


def epoch_scheduler_per_batch(module: Module):
    """R7: an epoch scheduler stepped once per batch."""
    for unit in module.steps():
        name = getattr(unit.function, "name", "").lower()
        per_batch = unit.in_epoch_loop or "epoch" in name
        if unit.node is unit.function:  # a function that is itself one step, e.g. train_step
            per_batch = per_batch or "step" in name or "batch" in name
        if not per_batch:
            continue
        for path in unit.paths:
            for event in path.events:
                if event.kind == SCHED_STEP and _epoch_scheduler(module, event.key):
                    yield event.node, "SCF701"


def _epoch_scheduler(module: Module, key: str | None) -> bool:
    classes = module.classes.get(key or "")
    if not classes or not classes <= EPOCH_SCHEDULERS:
        return False
    return not any(_counts_steps(call) for call in module.constructors.get(key, ()))


def _counts_steps(call: ast.Call) -> bool:
    """Whether a scheduler's length argument is counted in steps: len(loader), total_steps..."""
    length = call.args[1] if len(call.args) > 1 else None
    for keyword in call.keywords:
        if keyword.arg in ("T_max", "step_size", "milestones"):
            length = keyword.value
    if length is None:
        return False
    for node in ast.walk(length):
        if isinstance(node, ast.Call) and last_name(node) == "len":
            return True
        name = (dotted(node) or "").rsplit(".", 1)[-1].lower()
        if any(word in name for word in ("steps", "iter", "batch")):
            return True
    return False


def plateau_without_metric(module: Module):
    """R8: ReduceLROnPlateau.step() with nothing to monitor."""
    for node in module.nodes:
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "step"
            and not node.args
            and not node.keywords
            and module.classes.get(dotted(node.func.value) or "") == {PLATEAU}
        ):
            yield node, "SCF801"


def eval_mode_left_on(module: Module):
    """R9: model.eval() in the epoch loop, still on at the next training pass."""
    for loop, paths in module.loops_paths.items():
        if module.unit(loop) is not None:
            continue
        paths = [p.events for p in paths]
        if not any(e.kind == PASS for events in paths for e in events):
            continue
        for first in paths:
            for second in paths:  # two epochs: the eval of one meets the training of the next
                mode = {}
                for event in first + second:
                    if event.kind == EVAL_MODE and event.key:
                        mode[event.key] = event
                    elif event.kind == TRAIN_MODE and event.key:
                        mode[event.key] = None
                    elif event.kind == PASS:
                        for key, evaluated in mode.items():
                            if evaluated and key in event.keys and key not in event.trains:
                                yield evaluated.node, "SCF901"


def evaluation_with_grad(module: Module):
    """R10: an evaluation loop that builds an autograd graph."""
    candidates = []
    loops = dict(module.loops_paths)
    for node in module.nodes:  # [model(x) for x in loader] is a loop as well
        if isinstance(node, COMPREHENSIONS) and node not in module.hot:
            loops[node] = []
    for loop, paths in loops.items():
        kinds = {e.kind for p in paths for e in p.events}
        if kinds & {BACKWARD, STEP, PASS}:
            continue
        function = module.enclosing_function(loop)
        if _evaluates(module, loop, function) and not _grad_free(module, loop, function):
            candidates.append(loop)
    for loop in candidates:
        outer = module.parents.get(loop)
        while outer is not None and outer not in candidates:
            outer = module.parents.get(outer)
        if outer is None:  # the outermost of nested evaluation loops
            yield loop, "SCF1001"


def _evaluates(module: Module, loop, function) -> bool:
    name = getattr(function, "name", "").lower().lstrip("_")
    if name.startswith("test_"):
        return False  # a pytest test: its graphs live as long as the test, no longer
    named = name.startswith(EVAL_NAMES) or name in EVAL_EXACT or name.endswith(EVAL_ENDINGS)
    scope = function if function is not None else module.tree
    modes = sorted(
        (node.lineno, node.func.attr, dotted(node.func.value))
        for node in _own_nodes(scope)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("eval", "train")
        and node.lineno < loop.lineno
    )
    evaluated = set()
    for _, attr, key in modes:  # in source order: the mode the model is in at the loop
        if attr == "eval":
            evaluated.add(key)
        else:
            evaluated.discard(key)
    if not named and not evaluated:
        return False
    for node in _own_nodes(loop):
        if not isinstance(node, ast.Call):
            continue
        # The model called, or handed to a helper that calls it: compute_loss(model, batch).
        for key in [dotted(node.func)] + [dotted(arg) for arg in node.args]:
            last = (key or "").rsplit(".", 1)[-1].lower()
            if key in evaluated or "model" in last or "net" in last or last == "forward":
                return True
    return False


def _grad_free(module: Module, loop, function, callers: bool = True) -> bool:
    """Whether no graph is built at `loop`: under no_grad there, or wherever it is called."""
    node = loop
    while node is not None:
        if isinstance(node, ast.With | ast.AsyncWith) and _no_grad_with(node):
            return True
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if any(_no_grad_call(d) for d in node.decorator_list):
                return True
        node = module.parents.get(node)
    scope = function if function is not None else module.tree
    for inner in _own_nodes(loop):
        if isinstance(inner, ast.With | ast.AsyncWith) and _no_grad_with(inner):
            return True
    for inner in _own_nodes(scope):
        if isinstance(inner, ast.Call) and inner.lineno < loop.lineno and _no_grad_call(inner):
            return True  # torch.set_grad_enabled(False) earlier in the function
    if function is None or not callers:
        return False
    calls = module.project.callers(function)
    return bool(calls) and all(
        _grad_free(home, call, home.enclosing_function(call), callers=False) for call, home in calls
    )


def _no_grad_with(node) -> bool:
    return any(_no_grad_call(item.context_expr) for item in node.items)


def _no_grad_call(node) -> bool:
    name = last_name(node)
    if name in ("no_grad", "inference_mode"):
        return True
    if name == "set_grad_enabled" and isinstance(node, ast.Call) and node.args:
        flag = node.args[0]
        return isinstance(flag, ast.Constant) and flag.value is False
    return False


def _own_nodes(scope):
    """The nodes of a scope, not those of functions or classes defined inside it."""
    stack = list(ast.iter_child_nodes(scope))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            stack.extend(ast.iter_child_nodes(node))


def loss_tensor_kept(module: Module):
    """R11: a loss tensor accumulated or kept in a list across steps."""
    for unit in module.steps():
        names = {e.key for p in unit.paths for e in p.events if e.kind == BACKWARD and e.key} - {
            None
        }
        names = {name for name in names if "." not in name}
        for node in _own_nodes(unit.node):
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id in names
                and node.targets[0].id
                in {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)}
                and not _bare(node.value, names)
            ):
                names.discard(node.targets[0].id)  # loss = loss.item(): a number from here on
        if not names:
            continue
        for node in _own_nodes(unit.node):
            if _keeps(node, names):
                yield node, "SCF1101"


def _keeps(node, names: set) -> bool:
    if isinstance(node, ast.AugAssign):
        return dotted(node.target) not in names and _bare(node.value, names)
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        target = dotted(node.targets[0])
        if target in names or not isinstance(node.value, ast.BinOp):
            return False
        reads = {dotted(n) for n in ast.walk(node.value)}
        return target in reads and _bare(node.value, names)  # total = total + loss
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("append", "extend", "insert")
    ):
        return any(_bare(arg, names) for arg in node.args)
    return False


def _bare(node, names: set) -> bool:
    """Whether an expression holds one of the loss tensors themselves, graph and all."""
    if isinstance(node, ast.Name):
        return node.id in names
    if isinstance(node, ast.Attribute) and node.attr in SAFE_READS:
        return False
    if isinstance(node, ast.Call) and last_name(node) in SAFE_READS | SAFE_CALLS:
        return False
    if isinstance(node, ast.JoinedStr):
        return False
    return any(_bare(child, names) for child in ast.iter_child_nodes(node))


def optimizer_before_move(module: Module):
    """R1: the model moved after an optimizer was built from its parameters."""
    built = {}  # scope -> [(model key, optimizer key, line)]
    for node in module.nodes:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            target = dotted(node.targets[0])
            for model in _optimizer_models(module, node.value) if target else ():
                scope = module.enclosing_function(node) or module.tree
                built.setdefault(scope, []).append((model, target, node.lineno))
    for scope, optimizers in built.items():
        nodes = list(_own_nodes(scope))
        for node in nodes:
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in MOVES
            ):
                continue
            key = dotted(node.func.value)
            for model, optimizer, line in optimizers:
                if key and line < node.lineno and _related(key, model):
                    # Only before the optimizer is used: moving a trained model to export it
                    # is fine.
                    later = (n for n in nodes if getattr(n, "lineno", 0) > node.lineno)
                    if any(dotted(n) == optimizer for n in later):
                        yield node, "SCF101"
                        break


def _optimizer_models(module: Module, call: ast.Call) -> set:
    """The models whose parameters an optimizer is built from."""
    classes = module.constructed(call)
    helper = "optim" in (last_name(call) or "").lower()
    if not (classes and classes <= OPTIMIZERS) and not helper:
        return set()
    models = set()
    for node in ast.walk(call):
        if isinstance(node, ast.Call) and last_name(node) in ("parameters", "named_parameters"):
            if isinstance(node.func, ast.Attribute) and dotted(node.func.value):
                models.add(dotted(node.func.value))
    if helper and not models:  # build_optimizer(model, cfg)
        models = {dotted(arg) for arg in call.args if dotted(arg)}
    return models


def _related(key: str, model: str) -> bool:
    return key == model or key.startswith(model + ".") or model.startswith(key + ".")


def unsafe_load(module: Module):
    """C3: torch.load without weights_only=True."""
    from_torch = {
        alias.asname or alias.name
        for node in module.nodes
        if isinstance(node, ast.ImportFrom) and node.module == "torch"
        for alias in node.names
        if alias.name == "load"
    }
    for node in module.nodes:
        if not isinstance(node, ast.Call):
            continue
        name = dotted(node.func)
        if name != "torch.load" and name not in from_torch:
            continue
        keywords = {k.arg: k.value for k in node.keywords}
        if None in keywords:  # **kwargs: it may well be there
            continue
        # Only a missing flag: weights_only=False written out is a decision, as in TorchFix.
        if "weights_only" not in keywords:
            yield node, "SCF2301"


CHECKS = (
    optimizer_before_move,
    step_order,
    epoch_scheduler_per_batch,
    plateau_without_metric,
    eval_mode_left_on,
    evaluation_with_grad,
    loss_tensor_kept,
    unsafe_load,
)
