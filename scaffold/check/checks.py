"""The checks: each reads one file's training steps or calls and yields (node, code) pairs.

Out of reach statically: what values decide at run time (a GradScaler built with
enabled=flag is taken as on; `if step % k == 0` is read as either branch, never as a count;
a dtype, a patience or a scheduler mode read from a config file), which optimizer a backward()
feeds when two models share one loss graph (a GAN's step moved between its discriminator's two
backward() calls is not seen), and objects reached through containers, getattr or dynamic
dispatch. Helpers are followed into every file checked in the same run (project.py).
"""

import ast

from scaffold.check.flow import (
    BACKWARD,
    BUILD,
    CLIP,
    COMPREHENSIONS,
    EPOCH_SCHEDULERS,
    EVAL_MODE,
    EVALUATE,
    LOOPS,
    MOVES,
    OPTIMIZERS,
    PASS,
    PLATEAU,
    SCHED_STEP,
    SCHEDULERS,
    SEED,
    STEP,
    TRAIN_MODE,
    UNSCALE,
    UPDATE,
    ZERO,
    Ctx,
    Module,
    dotted,
    last_name,
    loss_of,
)
from scaffold.check.project import Project

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


def check_project(
    project: Project, wanted=None, problems: list | None = None
) -> list[tuple[Module, ast.AST, str]]:
    """Every finding in the project's files, as (file, node, code), once each; only the checks
    of the codes `wanted` (a predicate) when given. A finding in a helper is reported in the
    helper's file, whichever file's loop called it. A check that fails on a file adds a line
    to `problems` (raises without it); the other checks go on."""
    found = {}
    checks = [c for c, codes in CHECKS if wanted is None or any(map(wanted, codes))]
    for module in project.modules:
        for check in checks:
            try:
                results = list(check(module))
            except Exception as err:
                if problems is None:
                    raise
                problems.append(
                    f"{module.path or '<source>'}: internal error in scaffold check "
                    f"({check.__name__}: {err!r}); the other checks ran, please report it"
                )
                continue
            for node, code in results:
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
            if (
                event.kind == STEP
                and not _zeroed(module, event.key, zeroed)
                and _repeats(module, unit)
            ):
                yield event.node, "SCF202"
                break
        if not any(e.kind == UPDATE for e in events):
            for event in events:
                if event.kind == STEP and event.scaled:
                    yield event.node, "SCF504"
                    break
        for path in unit.paths:
            yield from _path_order([e for e in path.events if e.kind != PASS])


STEP_NAMES = ("step", "batch", "train", "update", "iter", "fit", "optimi")


def _repeats(module: Module, unit) -> bool:
    """Whether a step runs again and again: a loop, a function named like a training step, or
    one called from a loop. A function that runs backward() and step() once (a gradient check
    in a test) has no earlier gradients to clear."""
    if unit.node is not unit.function:
        return True
    if any(word in unit.function.name.lower() for word in STEP_NAMES):
        return True
    return any(
        isinstance(node, LOOPS + COMPREHENSIONS)
        for call, home in module.project.callers(unit.function)
        for node in _ancestors(home, call)
    )


def _ancestors(module: Module, node):
    node = module.parents.get(node)
    while node is not None:
        yield node
        node = module.parents.get(node)


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
    calls = _scheduler_calls(module, key)
    return bool(calls) and all(
        last_name(c) in EPOCH_SCHEDULERS and not _counts_steps(c) for c in calls
    )


def _step_scheduler(module: Module, key: str | None) -> bool:
    """Whether a scheduler's length is counted in optimizer steps (OneCycleLR, or a cosine
    schedule of len(loader) * epochs)."""
    calls = _scheduler_calls(module, key)
    return bool(calls) and all(
        last_name(c) in ("OneCycleLR", "CyclicLR") or _counts_steps(c) for c in calls
    )


def _scheduler_calls(module: Module, key: str | None) -> list:
    """The scheduler constructors behind a name: direct, or in the builder that returns it."""
    found = []
    for call in module.constructors.get(key or "", ()):
        if last_name(call) in SCHEDULERS:
            found.append(call)
            continue
        helper = module.resolve(call, Ctx(module.enclosing_function(call)))
        if helper is None:
            return []  # built somewhere this file cannot see: unknown
        built = [
            n for n in ast.walk(helper) if isinstance(n, ast.Call) and last_name(n) in SCHEDULERS
        ]
        if not built:
            return []
        found += built
    return found


def _counts_steps(call: ast.Call) -> bool:
    """Whether a scheduler's length argument is counted in steps: len(loader), total_steps..."""
    length = call.args[1] if len(call.args) > 1 else None
    for keyword in call.keywords:
        if keyword.arg in ("T_max", "step_size", "milestones", "total_iters", "T_0"):
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


NOT_HELPERS = {"getattr", "hasattr", "setattr", "isinstance", "type", "id", "print", "repr", "str"}


def _evaluates(module: Module, loop, function) -> bool:
    name = getattr(function, "name", "").lower().lstrip("_")
    if name.startswith("test_"):
        return False  # a pytest test: its graphs live as long as the test, no longer
    if _over_constants(loop):
        return False  # for flag in [True, False]: a few calls, not an evaluation over data
    named = name.startswith(EVAL_NAMES) or name in EVAL_EXACT or name.endswith(EVAL_ENDINGS)
    scope = function if function is not None else module.tree
    modes = sorted(
        (node.lineno, node.func.attr, dotted(node.func.value))
        for node in module.project.nodes_of(scope)
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
    for node in module.project.nodes_of(loop):
        if not isinstance(node, ast.Call):
            continue
        if last_name(node) in NOT_HELPERS:
            continue  # getattr(model, name), isinstance(model, ...): nothing runs the model
        # The model called, or handed to a helper that calls it: compute_loss(model, batch).
        for key in [dotted(node.func)] + [dotted(arg) for arg in node.args]:
            last = (key or "").rsplit(".", 1)[-1].lower()
            if key in evaluated or "model" in last or "net" in last or last == "forward":
                return True
    return False


def _over_constants(loop) -> bool:
    """A loop over a literal list or tuple of constants: `for debug in (True, False)`."""
    container = getattr(loop, "iter", None)
    return isinstance(container, ast.List | ast.Tuple | ast.Set) and all(
        isinstance(e, ast.Constant) for e in container.elts
    )


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
    for inner in module.project.nodes_of(loop):
        if isinstance(inner, ast.With | ast.AsyncWith) and _no_grad_with(inner):
            return True
    for inner in module.project.nodes_of(scope):
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


def loss_tensor_kept(module: Module):
    """R11: a loss tensor accumulated or kept in a list across steps."""
    for unit in module.steps():
        names = {e.key for p in unit.paths for e in p.events if e.kind == BACKWARD and e.key} - {
            None
        }
        names = {name for name in names if "." not in name}
        for node in module.project.nodes_of(unit.node):
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
        for node in module.project.nodes_of(unit.node):
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
        nodes = list(module.project.nodes_of(scope))
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


def autocast_around_update(module: Module):
    """R6: backward() or the optimizer step inside an autocast block."""
    for unit in module.steps():
        for path in unit.paths:
            for event in path.events:
                if event.kind in (BACKWARD, STEP) and _under_autocast(module, event.node):
                    yield event.node, "SCF601"


def _under_autocast(module: Module, node) -> bool:
    """Whether a node runs inside a `with ...autocast(...)` of its own function."""
    node = module.parents.get(node)
    while node is not None and not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        if isinstance(node, ast.With | ast.AsyncWith):
            for item in node.items:
                call = item.context_expr
                if last_name(call) == "autocast" and not _switched_off(call):
                    return True
        node = module.parents.get(node)
    return False


def _switched_off(call) -> bool:
    return isinstance(call, ast.Call) and any(
        k.arg == "enabled" and isinstance(k.value, ast.Constant) and k.value.value is False
        for k in call.keywords
    )


def scaler_with_bf16(module: Module):
    """R6: a GradScaler that stays on where autocast may run in bfloat16."""
    for node in module.nodes:
        if not (isinstance(node, ast.Call) and last_name(node) == "GradScaler"):
            continue
        enabled = next((k.value for k in node.keywords if k.arg == "enabled"), None)
        if enabled is not None and not (
            isinstance(enabled, ast.Constant) and enabled.value is True
        ):
            # A flag: on for float16 only, or a switch this file cannot read. Only a constant
            # True, or no flag at all, is on whatever the dtype.
            continue
        scope = module.enclosing_function(node) or module.tree
        if _may_use_bf16(module, scope):
            yield node, "SCF602"


def _may_use_bf16(module: Module, scope) -> bool:
    """Whether bfloat16 is named in a scope, in a module constant it reads, or in a helper of
    the checked files it calls."""
    constants = {
        target.id: node.value
        for node in module.tree.body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    for node in module.project.nodes_of(scope):
        if _names_bf16(node):
            return True
        if isinstance(node, ast.Name) and node.id in constants:
            if any(map(_names_bf16, ast.walk(constants[node.id]))):
                return True
        if isinstance(node, ast.Call):
            helper = module.resolve(node, Ctx(module.enclosing_function(node)))
            if helper is not None and any(map(_names_bf16, ast.walk(helper))):
                return True
    return False


def _names_bf16(node) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "bfloat16") or (
        isinstance(node, ast.Constant) and node.value in ("bfloat16", "bf16")
    )


def schedulers_in_epoch_loops(module: Module):
    """R7 in an epoch loop: an epoch scheduler stepped in a loop nested in it, in the batch loop
    of a helper in another file, or before the epoch's training pass; a per-step schedule
    stepped once per epoch."""
    for loop, paths in module.loops_paths.items():
        if module.unit(loop) is not None or not _has_pass(paths):
            continue
        for path in paths:
            trained = False
            for event in path.events:
                if event.kind == PASS:
                    trained = True
                    for inner in event.inner:
                        if inner.kind == SCHED_STEP and _epoch_scheduler(module, inner.key):
                            yield inner.node, "SCF701"
                    continue
                if event.kind != SCHED_STEP:
                    continue
                nested = _in_inner_loop(module, event.node, loop)
                if _epoch_scheduler(module, event.key):
                    if nested:
                        yield event.node, "SCF701"
                    elif not trained and not _conditional(module, event.node, loop):
                        yield event.node, "SCF702"
                elif _step_scheduler(module, event.key) and not nested:
                    yield event.node, "SCF703"


def _has_pass(paths) -> bool:
    return any(e.kind == PASS for p in paths for e in p.events)


def _in_inner_loop(module: Module, node, loop) -> bool:
    """Whether a node runs in a loop nested in `loop` (up to its own function)."""
    node = module.parents.get(node)
    while node is not None and node is not loop:
        if isinstance(node, LOOPS + COMPREHENSIONS):
            return True
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            return False
        node = module.parents.get(node)
    return False


def _conditional(module: Module, node, loop) -> bool:
    """Whether a node sits under an `if` inside `loop` (or inside a helper)."""
    node = module.parents.get(node)
    while node is not None and node is not loop:
        if isinstance(node, ast.If | ast.FunctionDef | ast.AsyncFunctionDef):
            return True
        node = module.parents.get(node)
    return False


LOSS_WORDS = ("loss", "mse", "mae", "rmse", "error", "perplexity", "ppl", "nll")
SCORE_WORDS = ("acc", "f1", "auc", "precision", "recall", "score", "iou", "dice", "bleu", "r2")


def plateau_metric(module: Module):
    """R8: ReduceLROnPlateau fed a training value, or a mode that does not fit its metric."""
    for node in module.nodes:
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "step"
            and (node.args or node.keywords)
        ):
            continue
        key = dotted(node.func.value)
        calls = _scheduler_calls(module, key)
        if not calls or any(last_name(c) != PLATEAU for c in calls):
            continue
        value = node.args[0] if node.args else node.keywords[0].value
        words = _words(value)
        if any("train" in w for w in words) or _is_backward_loss(module, value, node):
            yield node, "SCF802"
            continue
        modes = {_plateau_mode(c) for c in calls}
        is_loss = any(w.startswith(LOSS_WORDS) or w.endswith(LOSS_WORDS) for w in words)
        is_score = any(any(s in w for s in SCORE_WORDS) for w in words)
        if is_loss != is_score and len(modes) == 1:
            mode = modes.pop()
            if (mode == "max" and is_loss) or (mode == "min" and is_score):
                yield node, "SCF803"


def _words(node) -> set:
    """The lower-case names, attributes and string keys an expression reads."""
    words = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            words.add(n.id.lower())
        elif isinstance(n, ast.Attribute):
            words.add(n.attr.lower())
        elif isinstance(n, ast.Constant) and isinstance(n.value, str):
            words.add(n.value.lower())
    return words


def _plateau_mode(call: ast.Call) -> str | None:
    """min (the default), max, or None when the mode is not a constant."""
    for keyword in call.keywords:
        if keyword.arg == "mode":
            value = keyword.value
            return value.value if isinstance(value, ast.Constant) else None
    if call.args and len(call.args) > 1:
        value = call.args[1]
        return value.value if isinstance(value, ast.Constant) else None
    return "min"


def _is_backward_loss(module: Module, value, call) -> bool:
    """Whether `value` is the tensor a backward() of the same function ran from."""
    key = dotted(value)
    scope = module.enclosing_function(call) or module.tree
    return key is not None and any(
        isinstance(n, ast.Call)
        and last_name(n) in ("backward", "manual_backward")
        and dotted(loss_of(n)) == key
        for n in module.project.nodes_of(scope)
    )


def evaluation_in_training_mode(module: Module):
    """R10: an evaluation loop run, in an epoch loop or between steps, with the model still in
    training mode."""
    models = _model_names(module.project)
    for loop, paths in module.loops_paths.items():
        unit = module.unit(loop)
        if unit is None and not _has_pass(paths):
            continue
        # A step loop trains what it calls; an epoch loop's passes train what they call.
        start = {}
        if unit is not None:
            function = module.enclosing_function(loop)
            start = dict.fromkeys(module._called(loop, Ctx(function, (), (), module)), "train")
        for first in paths:
            for second in paths:  # the evaluation of one epoch meets the modes of the next
                mode = dict(start)
                for event in first.events + second.events:
                    if event.kind == TRAIN_MODE and event.key:
                        mode[event.key] = "train"
                    elif event.kind == EVAL_MODE and event.key:
                        mode[event.key] = "eval"
                    elif event.kind == PASS:
                        for key in event.called:  # a module is in training mode unless set
                            if _is_model(key, models):
                                mode.setdefault(key, "train")
                    elif event.kind == EVALUATE:
                        trained = [
                            k
                            for k in event.called
                            if mode.get(k) == "train" and _is_model(k, models)
                        ]
                        if trained and _evaluation_loop(module, event.node):
                            yield event.node, "SCF1002"


def _model_names(project) -> set:
    """The last names of what is put in train/eval mode or asked for its parameters."""
    if not hasattr(project, "model_names"):
        project.model_names = {
            (dotted(n.func.value) or "").rsplit(".", 1)[-1]
            for m in project.modules
            for n in m.nodes
            if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr in ("train", "eval", "parameters", "named_parameters")
        } - {""}
    return project.model_names


def _is_model(key: str, models: set) -> bool:
    """A module: put in train/eval mode or asked for its parameters somewhere in the checked
    files, or named like one (model, self.model, base_model, net); not model_inputs()."""
    last = key.rsplit(".", 1)[-1]
    return last in models or last.lower().endswith(("model", "net"))


def _evaluation_loop(module: Module, loop) -> bool:
    home = module.project.module_at(loop)
    function = home.enclosing_function(loop)
    return _grad_free(home, loop, function) or _evaluates(home, loop, function)


def per_batch_mean(module: Module):
    """R12: an epoch mean divided by the number of batches, or a mean of per-batch values."""
    models = _model_names(module.project)
    for scope in [module.tree, *module.function_nodes]:
        sums, lists, aliases = set(), set(), {}
        iterables = set()
        for loop in module.project.nodes_of(scope):
            if not isinstance(loop, ast.For | ast.AsyncFor) or not _batch_loop(
                module, loop, models
            ):
                continue
            iterables.add(dotted(_iterable(loop.iter)))
            for node in module.project.nodes_of(loop):
                if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add):
                    sums.add(dotted(node.target))
                elif (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "append"
                    and any(w.startswith(LOSS_WORDS) for a in node.args for w in _words(a))
                ):
                    lists.add(dotted(node.func.value))
        sums.discard(None), lists.discard(None), iterables.discard(None)
        if not (sums or lists):
            continue
        for node in module.project.nodes_of(scope):
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                stacked = {dotted(a) for c in ast.walk(node.value) if isinstance(c, ast.Call)
                           for a in c.args} & lists  # fmt: skip
                if stacked and isinstance(node.targets[0], ast.Name):
                    aliases[node.targets[0].id] = stacked
        held = lists | set(aliases)
        for node in module.project.nodes_of(scope):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
                counted = _len_of(node.right)
                left = dotted(node.left) or dotted(_inner(node.left))
                if counted in iterables and left in sums:
                    yield node, "SCF1201"
                elif counted in held and last_name(node.left) == "sum":
                    yield node, "SCF1201"
            elif isinstance(node, ast.Call) and last_name(node) == "mean":
                func = node.func
                target = dotted(func.value) if isinstance(func, ast.Attribute) else None
                args = {dotted(a) for a in node.args} | {
                    dotted(a) for c in node.args if isinstance(c, ast.Call) for a in c.args
                }
                owner = _inner(func.value) if isinstance(func, ast.Attribute) else None
                if target in held or args & held or dotted(owner) in held:
                    yield node, "SCF1201"


def _batch_loop(module: Module, loop, models: set) -> bool:
    """A loop over batches: a training step, or one that calls the model."""
    if module.unit(loop) is not None:
        return True
    return any(
        isinstance(n, ast.Call) and _is_model(dotted(n.func) or "", models | {"net"})
        for n in module.project.nodes_of(loop)
    )


def _iterable(node):
    """The loader in `enumerate(tqdm(loader))`."""
    while (
        isinstance(node, ast.Call)
        and last_name(node) in ("enumerate", "tqdm", "iter")
        and node.args
    ):
        node = node.args[0]
    return node


def _len_of(node) -> str | None:
    if isinstance(node, ast.Call) and last_name(node) == "len" and node.args:
        return dotted(node.args[0])
    return None


def _inner(node):
    """`torch.stack(losses)` -> losses; `x.item()` -> x."""
    while isinstance(node, ast.Call):
        if node.args and isinstance(node.func, ast.Attribute) and not dotted(node.func.value):
            node = node.args[0]
        elif isinstance(node.func, ast.Attribute) and dotted(node.func.value) in (
            "torch",
            "np",
            "numpy",
        ):
            node = node.args[0] if node.args else node
            break
        elif isinstance(node.func, ast.Attribute):
            node = node.func.value
        else:
            break
    return node


def accumulation_without_division(module: Module):
    """R14: the optimizer steps every k-th batch and each batch's loss is not divided by k."""
    for unit in module.steps():
        events = [e for p in unit.paths for e in p.events]
        steps = [e for e in events if e.kind == STEP]
        if not steps or not all(_every_kth(module, e.node, unit.node) for e in steps):
            continue
        for event in events:
            if event.kind == BACKWARD and not _divided(module, event, unit):
                yield event.node, "SCF1401"


def _every_kth(module: Module, node, stop) -> bool:
    node = module.parents.get(node)
    while node is not None and node is not stop:
        if isinstance(node, ast.If) and any(
            isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod) for n in ast.walk(node.test)
        ):
            return True
        node = module.parents.get(node)
    return False


def _divided(module: Module, event, unit) -> bool:
    """Whether the loss a backward() runs from is scaled: divided, or weighted."""
    scaling = (ast.Div, ast.Mult)
    call = event.node
    for n in ast.walk(call):
        if isinstance(n, ast.BinOp) and isinstance(n.op, scaling):
            return True
    key = dotted(loss_of(call))
    if key is None:
        return True  # a loss this checker cannot follow
    scope = module.enclosing_function(call) or module.tree
    for n in module.project.nodes_of(scope):
        if isinstance(n, ast.AugAssign) and dotted(n.target) == key:
            if isinstance(n.op, scaling):
                return True
        elif isinstance(n, ast.Assign) and key in {dotted(t) for t in n.targets}:
            for part in ast.walk(n.value):
                if isinstance(part, ast.BinOp) and isinstance(part.op, scaling):
                    return True
                if isinstance(part, ast.Call):
                    helper = module.resolve(part, Ctx(scope if scope is not module.tree else None))
                    if helper is not None and any(
                        isinstance(h, ast.BinOp) and isinstance(h.op, scaling)
                        for h in ast.walk(helper)
                    ):
                        return True
    return False


def sampler_without_set_epoch(module: Module):
    """R15: a shuffling DistributedSampler, and set_epoch() called nowhere."""
    project = module.project
    if not hasattr(project, "sets_epoch"):
        project.sets_epoch = any(
            isinstance(n, ast.Call) and last_name(n) == "set_epoch"
            for m in project.modules
            for n in m.nodes
        )
    if project.sets_epoch:
        return
    for node in module.nodes:
        if isinstance(node, ast.Call) and last_name(node) == "DistributedSampler":
            shuffle = next((k.value for k in node.keywords if k.arg == "shuffle"), None)
            if isinstance(shuffle, ast.Constant) and shuffle.value is False:
                continue
            yield node, "SCF1501"


def nothing_seeded(module: Module):
    """S1: an optimizer built, then trained, with no seed set before it in any caller."""
    scopes = {module.enclosing_function(loop) for loop, paths in module.loops_paths.items()
              if _has_pass(paths) or module.unit(loop) is not None}  # fmt: skip
    scopes |= {unit.function for unit in module.function_units}
    # A trainer class builds its optimizer in __init__ and trains in another method.
    inits = {
        module.methods[module.owner[s]].get("__init__")
        for s in scopes
        if s is not None and module.owner.get(module.method_of(s)) is not None
        for s in [module.method_of(s)]
    } - {None}
    for scope in scopes | inits:
        body = scope.body if scope is not None else module.tree.body
        for path in module.body_paths(body, Ctx(scope, (), (scope,), module)):
            kinds = [e.kind for e in path.events]
            if BUILD not in kinds:
                continue
            built = kinds.index(BUILD)
            if SEED in kinds[:built]:
                continue
            if scope not in inits and not {PASS, STEP} & set(kinds[built:]):
                continue
            if scope is not None and _callers_seed(module.project, scope):
                continue
            yield path.events[built].node, "SCF3101"
            break


def _callers_seed(project, function, depth: int = 0) -> bool:
    """Whether every call of `function` comes after a seed in its caller, or its caller's."""
    calls = project.callers(function)
    if not calls or depth > 4:
        return False
    for call, home in calls:
        scope = home.enclosing_function(call)
        # What the caller runs before the call: the statements that end before it, at any
        # depth (a seed under `if __name__ == "__main__":`), outermost first.
        earlier = {
            n
            for n in home.project.nodes_of(scope if scope is not None else home.tree)
            if isinstance(n, ast.stmt) and n.end_lineno < call.lineno
        }
        before = [n for n in earlier if home.parents.get(n) not in earlier]
        before.sort(key=lambda n: n.lineno)
        seeded = any(
            event.kind == SEED
            for path in home.body_paths(before, Ctx(scope, (), (scope,), home))
            for event in path.events
        )
        if not seeded and not (scope is not None and _callers_seed(project, scope, depth + 1)):
            return False
    return True


def workers_without_generator(module: Module):
    """S2: a DataLoader with worker processes and no generator of its own."""
    for node in module.nodes:
        if not (isinstance(node, ast.Call) and last_name(node) == "DataLoader"):
            continue
        keywords = {k.arg: k.value for k in node.keywords}
        if None in keywords or "generator" in keywords:
            continue
        workers = keywords.get("num_workers")
        if workers is None or (isinstance(workers, ast.Constant) and not workers.value):
            continue
        yield node, "SCF3201"


# Each check, and the codes it reports.
CHECKS = (
    (optimizer_before_move, ("SCF101",)),
    (step_order, ("SCF201", "SCF202", "SCF301", "SCF401", "SCF501", "SCF502", "SCF503", "SCF504")),
    (autocast_around_update, ("SCF601",)),
    (scaler_with_bf16, ("SCF602",)),
    (epoch_scheduler_per_batch, ("SCF701",)),
    (schedulers_in_epoch_loops, ("SCF701", "SCF702", "SCF703")),
    (plateau_without_metric, ("SCF801",)),
    (plateau_metric, ("SCF802", "SCF803")),
    (eval_mode_left_on, ("SCF901",)),
    (evaluation_with_grad, ("SCF1001",)),
    (evaluation_in_training_mode, ("SCF1002",)),
    (loss_tensor_kept, ("SCF1101",)),
    (per_batch_mean, ("SCF1201",)),
    (accumulation_without_division, ("SCF1401",)),
    (sampler_without_set_epoch, ("SCF1501",)),
    (unsafe_load, ("SCF2301",)),
    (nothing_seeded, ("SCF3101",)),
    (workers_without_generator, ("SCF3201",)),
)
