"""The checks across steps and epochs: schedulers (R7, R8), train/eval modes and no_grad
(R9, R10), per-batch means (R12)."""

import ast

from scaffold.check.flow import (
    BACKWARD,
    BACKWARD_CALLS,
    COMPREHENSIONS,
    EPOCH_SCHEDULERS,
    EVAL_MODE,
    EVALUATE,
    FUNCTIONS,
    LOOPS,
    PASS,
    PLATEAU,
    SCHED_STEP,
    SCHEDULERS,
    STEP,
    TRAIN_MODE,
    WARMUP_FACTORIES,
    Ctx,
    Module,
    backward_sources,
    dotted,
    last_name,
    loss_of,
)

# Names of functions that evaluate a model; `test_*` is left out: those are pytest's.
EVAL_NAMES = ("validat", "evaluat", "eval", "val_", "valid_")
EVAL_EXACT = {"test", "test_epoch", "test_loop", "run_test", "val", "valid", "validation"}
EVAL_ENDINGS = ("_eval", "_evaluate", "_evaluation", "_validation", "_validate", "_val", "_test")


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
                if event.kind == SCHED_STEP and _epoch_scheduler_here(module, event):
                    yield event.node, "SCF701"


def _epoch_scheduler_here(module: Module, event) -> bool:
    """An epoch scheduler, stepped where the run is not counted in iterations, or given a
    length that names epochs."""
    if not _epoch_scheduler(module, event.key):
        return False
    home = module.project.module_at(event.node)
    if not _run_in_iterations(home, event.node):
        return True
    return any(_names_epochs(call) for call in _scheduler_calls(module, event.key))


def _names_epochs(call: ast.Call) -> bool:
    return any(
        "epoch" in (dotted(n) or (n.value if isinstance(n, ast.Constant) else "") or "").lower()
        for arg in [*call.args[1:], *(k.value for k in call.keywords)]
        for n in ast.walk(arg)
        if isinstance(n, ast.Name | ast.Attribute)
        or (isinstance(n, ast.Constant) and isinstance(n.value, str))
    )


def _run_in_iterations(module: Module, node) -> bool:
    """Whether the batch loop a node runs in ends the run on a count of its own iterations, not
    of epochs (DeepLabV3Plus: `while True:` around `for images, labels in loader: cur_itrs += 1
    ... if cur_itrs >= opts.total_itrs: return`): with no count of epochs to decay over, a
    schedule stepped every batch counts iterations. A `while cur_itrs < total_itrs:` around it
    says the same. Under `for epoch in range(args.epochs):` the run is counted in epochs too,
    and an epoch scheduler stepped every batch is still reported."""
    loop = next((a for a in module.ancestors(node) if isinstance(a, LOOPS)), None)
    if loop is None:
        return False
    counters = {
        dotted(n.target)
        for n in ast.walk(loop)
        if isinstance(n, ast.AugAssign)
        and isinstance(n.op, ast.Add)
        and isinstance(n.value, ast.Constant)
        and n.value.value == 1
    } - {None}
    if not counters:
        return False

    def reads_counter(test) -> bool:
        return any(
            isinstance(c, ast.Compare) and {dotted(n) for n in ast.walk(c)} & counters
            for c in ast.walk(test)
        )

    outers = []
    for outer in module.ancestors(loop):
        if isinstance(outer, FUNCTIONS):
            break
        outers.append(outer)
    if any(
        isinstance(outer, ast.For | ast.AsyncFor)
        and any("epoch" in (dotted(n) or "").lower() for n in ast.walk(outer.iter))
        for outer in outers
    ):
        return False  # `for epoch in range(args.epochs):` counts the run in epochs as well
    for outer in outers:
        if isinstance(outer, ast.While) and reads_counter(outer.test):
            return True
    for n in ast.walk(loop):
        if isinstance(n, ast.If) and reads_counter(n.test):
            if any(isinstance(s, ast.Return | ast.Break) for s in n.body):
                return True
    return False


def _epoch_scheduler(module: Module, key: str | None) -> bool:
    calls = _scheduler_calls(module, key)
    return bool(calls) and all(
        last_name(c) in EPOCH_SCHEDULERS and not _counts_steps(c, module) for c in calls
    )


def _step_scheduler(module: Module, key: str | None) -> bool:
    """Whether a scheduler's length is counted in optimizer steps (OneCycleLR, or a cosine
    schedule of len(loader) * epochs)."""
    calls = _scheduler_calls(module, key)
    return bool(calls) and all(
        last_name(c) in ("OneCycleLR", "CyclicLR")
        or (last_name(c) in (*WARMUP_FACTORIES, "get_scheduler") and not _in_epochs(c))
        or _counts_steps(c, module)
        or _lambda_in_steps(module, c)
        for c in calls
    )


def _in_epochs(call: ast.Call) -> bool:
    """Whether a warm-up factory is given lengths in epochs: names of epochs and no len() nor
    names of steps (`get_linear_schedule_with_warmup(opt, warmup_epochs, epochs)` stepped once
    an epoch is right)."""
    words, counted = set(), False
    for arg in [*call.args[1:], *(k.value for k in call.keywords if k.arg != "optimizer")]:
        for node in ast.walk(arg):
            if isinstance(node, ast.Call) and last_name(node) == "len":
                counted = True
            words.add((dotted(node) or "").rsplit(".", 1)[-1].lower())
    if counted or any(s in w for w in words for s in STEP_WORDS):
        return False
    return any("epoch" in w for w in words)


STEP_WORDS = ("step", "iter", "batch")


def _lambda_in_steps(module: Module, call: ast.Call) -> bool:
    """Whether a LambdaLR's (or MultiplicativeLR's) factor is a function of the step count: the
    lambda, or the function it names, reads names of steps or iterations (`lambda step:
    min(1, step / warmup_steps)`) and none of epochs (`lambda epoch: ...` steps per epoch)."""
    if last_name(call) not in ("LambdaLR", "MultiplicativeLR"):
        return False
    factor = call.args[1] if len(call.args) > 1 else None
    for keyword in call.keywords:
        if keyword.arg == "lr_lambda":
            factor = keyword.value
    if factor is None:
        return False
    if not isinstance(factor, ast.Lambda):
        found = module.resolve(ast.Call(func=factor, args=[], keywords=[]),
                               Ctx(module.enclosing_function(call)))  # fmt: skip
        if found is None:
            found = next(  # `lr_lambda = lambda it: ...` or a partial of a function
                (n.value for n in module.project.nodes_of(module.enclosing_function(call)
                 or module.tree) if isinstance(n, ast.Assign)
                 and dotted(factor) in {dotted(t) for t in n.targets}),
                None,
            )  # fmt: skip
        if found is None:
            return False
        factor = found
    words = set()
    for node in ast.walk(factor):
        if isinstance(node, ast.arg):
            words.add(node.arg.lower())
        elif isinstance(node, ast.Name | ast.Attribute):
            words.add((dotted(node) or "").rsplit(".", 1)[-1].lower())
    if any("epoch" in w for w in words):
        return False
    return any(s in w for w in words for s in STEP_WORDS)


def _scheduler_calls(module: Module, key: str | None) -> list:
    """The scheduler constructors behind a name: direct, or in the builder that returns it."""
    found = []
    for call in module.constructors.get(key or "", ()):
        if last_name(call) in SCHEDULERS or (
            last_name(call) == "get_scheduler"
            and any(k.arg == "num_training_steps" for k in call.keywords)
        ):
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


def _counts_steps(call: ast.Call, module: Module | None = None) -> bool:
    """Whether a scheduler's length argument is counted in steps: len(loader), total_steps,
    StepLR(step_size=iters_per_epoch), or a local name set from one (le = cfg["num_iters"])."""
    length = call.args[1] if len(call.args) > 1 else None
    for keyword in call.keywords:
        if keyword.arg in ("T_max", "step_size", "milestones", "total_iters", "T_0"):
            length = keyword.value
    if length is None:
        return False
    todo, seen = [length], set()
    while todo:
        for node in ast.walk(todo.pop()):
            if isinstance(node, ast.Call) and last_name(node) == "len":
                return True
            name = (dotted(node) or "").rsplit(".", 1)[-1].lower()
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                name = node.value.lower()
            if any(word in name for word in ("steps", "iter", "batch")):
                return True
            if isinstance(node, ast.Name) and module is not None and node.id not in seen:
                seen.add(node.id)
                scope = module.enclosing_function(call) or module.tree
                todo += [
                    n.value
                    for n in module.project.nodes_of(scope)
                    if isinstance(n, ast.Assign) and node.id in {dotted(t) for t in n.targets}
                ]
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
            yield from _eval_left_in_step_loop(module, loop, paths)
            continue
        paths = [p.events for p in paths]
        if not any(e.kind == PASS for events in paths for e in events):
            continue
        chosen = _chosen_modes(module, paths)
        for first in paths:
            for second in paths:  # two epochs: the eval of one meets the training of the next
                mode = {}
                for event in first + second:
                    if event.kind == EVAL_MODE and event.key and event.node in chosen:
                        mode[event.key] = None  # the mode picked for the pass that follows
                    elif event.kind == EVAL_MODE and event.key:
                        mode[event.key] = event
                    elif event.kind == TRAIN_MODE and event.key:
                        mode[event.key] = None
                    elif event.kind == PASS:
                        for key, evaluated in mode.items():
                            if evaluated and _trained_by(key, event):
                                yield evaluated.node, "SCF901"


def _eval_left_in_step_loop(module: Module, loop, paths):
    """R9 in a loop that is itself the training step (a script's `for step in range(n):` that
    validates every k-th step, then trains): an eval() on the validating path, still on at the
    backward() of that step or of the next ones. Reported when the mode the step trains in
    depends on whether validation ran before it; a mode set on every path (a frozen backbone
    put in eval at the top of each step) is chosen, and a module the step runs only under
    no_grad is not trained by it."""
    if not any(e.kind == EVAL_MODE and _mode_event_key(e) for p in paths for e in p.events):
        return
    trained = _step_trained_keys(module, loop)
    if not trained:
        return
    start = dict.fromkeys(_eval_keys(module, loop, module.enclosing_function(loop)), "start")
    seen: dict = {}  # (backward, key) -> the modes found there: the eval() call, "start", None
    for first in paths:
        # a path that breaks out of the loop or returns has no next step
        nexts = [None] + ([] if first.done in ("break", "return") else [p.events for p in paths])
        for second in nexts:
            mode = dict(start)
            for event in first.events + (second or []):
                if event.kind in (EVAL_MODE, TRAIN_MODE):
                    key = _mode_event_key(event)
                    for same in _same_module(module, key) if key else ():
                        mode[same] = event.node if event.kind == EVAL_MODE else None
                elif event.kind == BACKWARD:
                    for key in trained:
                        seen.setdefault((event.node, key), set()).add(mode.get(key))
    reported = set()
    for modes in seen.values():
        evals = modes - {None, "start"}
        if evals and None in modes:
            for node in sorted(evals - reported, key=lambda n: (n.lineno, n.col_offset)):
                reported.add(node)
                yield node, "SCF901"


def _mode_event_key(event) -> str | None:
    """The module a mode call sets: `model` for model.eval(), and for a chain of moves and
    modes, `model.cpu().eval()`, `model.to(device).train()`."""
    if event.key:
        return event.key
    func = getattr(event.node, "func", None)
    return _chain_root(func.value) if isinstance(func, ast.Attribute) else None


def _step_trained_keys(module: Module, loop) -> set:
    """The names a step loop runs outside no_grad and outside the loops in it that run no
    backward() (its validation): model(x), and the wrappers or modules bound to it."""
    keys = set()
    hot = module.project.hot

    def walk(node):
        if isinstance(node, ast.With | ast.AsyncWith) and _no_grad_with(node):
            return
        if isinstance(node, LOOPS + COMPREHENSIONS) and node is not loop and node not in hot:
            return
        if isinstance(node, FUNCTIONS + (ast.ClassDef,)):
            return
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in FORWARDS:
                func = func.value
            key = dotted(func)
            if key:
                keys.update(_same_module(module, key))
        for child in ast.iter_child_nodes(node):
            walk(child)

    walk(loop)
    names = _trainable_names(module.project)
    return {
        key for key in keys if any(k.rsplit(".", 1)[-1] in names for k in _same_module(module, key))
    }


def _trainable_names(project) -> set:
    """The last names of the modules something trains: handed to an optimizer through
    `.parameters()` (or asked for them), put in training mode, or zeroed. A feature extractor
    only ever put in eval mode (DINOv2's linear probe) is not among them."""
    if not hasattr(project, "trainable_names"):
        project.trainable_names = {
            (_chain_root(n.func.value) or "").rsplit(".", 1)[-1]
            for m in project.modules
            for n in m.nodes
            if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr in ("parameters", "named_parameters", "train", "zero_grad")
        } - {""}
    return project.trainable_names


def _trained_by(key: str, event) -> bool:
    """Whether a training pass runs a module in eval mode without setting training mode: it
    calls it, or hands it to a helper (an EMA copy only updated from the model is not run; a
    teacher run only under no_grad is not trained)."""
    if key in event.trains or key in event.frozen:
        return False
    return key in event.keys


def _chosen_modes(module: Module, paths: list) -> set:
    """The eval() calls that choose the mode of the training pass right after them: in the
    function that runs the pass, with no evaluation between, and every way into that pass
    sets the module's mode there too. A linear probe's train() puts the frozen backbone in
    eval on purpose; `if phase == "train": model.train() else: model.eval()` picks a mode
    per phase. A pass some way reaches with no mode set of its own is not chosen for: an
    eval() left from the previous phase or epoch is still on there."""
    picked: dict = {}  # (pass loop, key) -> the eval() calls picking it, or None: not chosen
    for events in paths:
        seen = set()
        for i, event in enumerate(events):
            if event.kind != PASS or event.node in seen:
                continue
            seen.add(event.node)
            home = module.project.enclosing.get(event.node)
            before = {}
            for earlier in reversed(events[:i]):
                if earlier.kind in (PASS, EVALUATE):
                    break
                if earlier.kind in (EVAL_MODE, TRAIN_MODE) and earlier.key:
                    if module.project.enclosing.get(earlier.node) is home:
                        before.setdefault(earlier.key, earlier)
            for key in event.keys:
                slot = (event.node, key)
                found = before.get(key)
                if found is None:
                    picked[slot] = None
                elif picked.get(slot, ()) is not None:
                    picked[slot] = (*picked.get(slot, ()), found)
    return {e.node for calls in picked.values() if calls for e in calls if e.kind == EVAL_MODE}


def evaluation_with_grad(module: Module):
    """R10: an evaluation loop that builds an autograd graph."""
    candidates = []
    loops = dict(module.loops_paths)
    for node in module.nodes:  # [model(x) for x in loader] is a loop as well
        if isinstance(node, COMPREHENSIONS) and node not in module.project.hot:
            loops[node] = []
    for loop, paths in loops.items():
        kinds = {e.kind for p in paths for e in p.events}
        if (
            kinds & {BACKWARD, STEP, PASS}
            or _updates(module, loop)
            or _differentiates(module, loop)
        ):
            continue
        function = module.enclosing_function(loop)
        if (
            _evaluates(module, loop, function)
            and not _grad_free(module, loop, function)
            and not _feeds_backward(module, loop, function)
        ):
            candidates.append(loop)
    for loop in candidates:
        outer = module.parents.get(loop)
        while outer is not None and outer not in candidates:
            outer = module.parents.get(outer)
        if outer is None:  # the outermost of nested evaluation loops
            yield loop, "SCF1001"


NOT_HELPERS = {"getattr", "hasattr", "setattr", "isinstance", "type", "id", "print", "repr", "str"}
# Methods that run a model's forward pass; anything else called on it (parameters(), update(),
# load_state_dict(), requires_grad_(), generate(), which is itself under no_grad) does not.
FORWARDS = {
    "forward", "predict", "encode", "decode", "forward_features", "get_intermediate_layers",
    "extract_features", "features",
}  # fmt: skip


def _updates(module: Module, loop) -> bool:
    """Whether a loop updates weights itself: an optimizer step or a backward() in it, even one
    the step reading did not pair (a test stepping an optimizer with made-up gradients)."""
    for node in module.project.nodes_of(loop):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in BACKWARD_CALLS:
                return True
            if node.func.attr == "step" and module.kind(dotted(node.func.value)) == "optimizer":
                return True
    return False


def _differentiates(module: Module, loop) -> bool:
    """Whether a loop needs autograd itself: it calls torch.autograd.grad (an adversarial
    attack, a saliency map, a gradient penalty), which no_grad would break."""
    return any(
        isinstance(node, ast.Call) and dotted(node.func) in ("torch.autograd.grad", "autograd.grad")
        for node in module.project.nodes_of(loop)
    )


def _eval_keys(module: Module, loop, function) -> set:
    """The modules in eval mode where `loop` starts: put there earlier in its function, or, in
    a method, anywhere in its class (a predictor's __init__) and never back in training mode."""
    scope = function if function is not None else module.tree
    modes = sorted(
        (node.lineno, node.func.attr, key)
        for node in module.project.nodes_of(scope)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("eval", "train")
        and node.lineno < loop.lineno
        for key in [_mode_key(module, node)]
        if key is not None
    )
    evaluated = set()
    for _, attr, key in modes:  # in source order: the mode the model is in at the loop
        if attr == "eval":
            evaluated.add(key)
        else:
            evaluated.discard(key)
    cls = module.owner.get(module.method_of(function)) if function is not None else None
    if cls is not None and not evaluated:
        evaluated |= _class_eval_keys(module, cls)
    return evaluated


def _class_eval_keys(module: Module, cls) -> set:
    """The `self.` modules a class puts in eval mode and never back in training mode."""
    memo = module.project.__dict__.setdefault("class_eval_keys", {})
    if cls not in memo:
        calls = [
            (node.func.attr, _mode_key(module, node))
            for method in module.methods[cls].values()
            for node in module.project.nodes_of(method)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("eval", "train")
        ]
        trained = {key for attr, key in calls if attr == "train"}
        memo[cls] = {
            key
            for attr, key in calls
            if attr == "eval" and key and key.startswith("self.") and key not in trained
        }
    return memo[cls]


def _mode_key(module: Module, call) -> str | None:
    """`model` for model.eval(); `self.ema` for `self.ema = deepcopy(m).eval()`; None when it
    cannot be named."""
    key = dotted(call.func.value)
    if key is not None:
        return key
    parent = module.parents.get(call)
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1:
        return dotted(parent.targets[0])
    return None


def _evaluates(module: Module, loop, function) -> bool:
    name = getattr(function, "name", "").lower().lstrip("_")
    if name.startswith("test_"):
        return False  # a pytest test: its graphs live as long as the test, no longer
    if _over_constants(loop):
        return False  # for flag in [True, False]: a few calls, not an evaluation over data
    named = name.startswith(EVAL_NAMES) or name in EVAL_EXACT or name.endswith(EVAL_ENDINGS)
    if not named and not _may_run_model(module, loop):
        return False
    evaluated = _eval_keys(module, loop, function)
    if not named and not evaluated:
        return False
    return _runs_model(module, loop, evaluated, function)


def _may_run_model(module: Module, loop) -> bool:
    """A cheap first look: some call in the loop, or an argument of one, names a module in
    eval or training mode somewhere, or one named like a model."""
    models = _eval_names(module.project)
    for node in module.project.nodes_of(loop):
        if isinstance(node, ast.Call):
            for part in (node.func, *node.args):
                key = dotted(part)
                if key is None:
                    continue
                last = key.rsplit(".", 1)[-1]
                if (
                    last in models
                    or _model_like(key, set())
                    or (isinstance(part, ast.Attribute) and part.attr in FORWARDS)
                ):
                    return True
    return False


def _model_like(key: str | None, evaluated: set) -> bool:
    if not key:
        return False
    last = key.rsplit(".", 1)[-1].lower()
    return key in evaluated or "model" in last or "net" in last


def _runs_model(module: Module, scope, evaluated: set, function, depth: int = 0) -> bool:
    """Whether `scope` runs a model's forward pass with autograd on: calls it (model(x),
    model.forward(x)), or hands it to a helper of the checked files that does. A helper this
    run cannot read is not taken as running it: it may well do so under no_grad."""
    for node in module.project.nodes_of(scope):
        if not isinstance(node, ast.Call) or last_name(node) in NOT_HELPERS:
            continue
        if _grad_free_here(module, node, scope) or _measured_here(module, node, scope):
            continue
        func = dotted(node.func)
        if _model_like(func, evaluated):
            if _frozen_module(module, func, node):
                continue  # every parameter has requires_grad=False: no graph is built
            if _function_alias(module, node.func, scope):
                continue  # model_stats_fun = flop_count; model_stats_fun(model, inputs)
            helper = module.resolve(node, Ctx(function)) if depth < 3 else None
            if not isinstance(helper, FUNCTIONS):
                if _factory(func):
                    continue  # build_model(cfg), timm.create_model(name): builds, runs nothing
                return True
            # A function of the checked files named like a model (build_model(cfg),
            # self.get_params_for_submodel(m)) is read, not taken for a forward pass
            if not grad_free_function(module, helper) and _runs_model(
                module.project.module_at(helper), helper, _handed(node, helper, evaluated),
                helper, depth + 1,
            ):  # fmt: skip
                return True
            continue
        if (
            isinstance(node.func, ast.Attribute)
            and node.func.attr in FORWARDS
            and _model_like(dotted(node.func.value), evaluated)
            and not _frozen_module(module, dotted(node.func.value), node)
        ):
            return True
        args = [*node.args, *(k.value for k in node.keywords)]
        passed = [i for i, a in enumerate(args) if _model_like(dotted(a), evaluated)]
        if not passed or depth >= 3:
            continue
        helper = module.resolve(node, Ctx(function))
        if not isinstance(helper, FUNCTIONS) or grad_free_function(module, helper):
            continue
        home = module.project.module_at(helper)
        if _runs_model(home, helper, _handed(node, helper, evaluated), helper, depth + 1):
            return True
    return False


def _frozen_module(module: Module, key: str | None, node) -> bool:
    """Whether the module a name holds where `node` runs has every parameter frozen, so its
    forward builds no graph: set by `.requires_grad_(False)` (on its own, or chained where it is
    built: `G = Net().train().requires_grad_(False).to(device)`), or by `for p in
    X.parameters(): p.requires_grad = False`, earlier in the same function, or a
    `copy.deepcopy()` of a module frozen then (StyleGAN2-ADA's `G_ema = copy.deepcopy(G).eval()`).
    A name given any other value in that scope (a wrapper of itself, `torch.jit.trace(x, ...)`,
    aside), or unfrozen anywhere in it (`X.requires_grad_(True)`), is not taken as frozen."""
    if not key:
        return False
    scope = module.enclosing_function(node) or module.tree
    return _frozen_at(module, scope, key, node.lineno, 0)


def _frozen_at(module: Module, scope, key: str, line: int, depth: int) -> bool:
    if depth > 3:
        return False
    frozen = False
    for stmt in sorted(
        (n for n in module.project.nodes_of(scope) if isinstance(n, ast.stmt)),
        key=lambda n: (n.lineno, n.col_offset),
    ):
        if isinstance(stmt, ast.Assign) and key in {dotted(t) for t in stmt.targets}:
            if stmt.lineno >= line:
                continue
            value = stmt.value
            if _freezes(value) is False:
                return False  # built and unfrozen in one chain
            if _freezes(value):
                frozen = _always(module, stmt, scope)
            elif _copy_of(value) is not None:
                frozen = _frozen_at(module, scope, _copy_of(value), stmt.lineno, depth + 1)
            elif not _wraps_itself(value, key):
                frozen = False
            continue
        if isinstance(stmt, ast.Expr):
            for call in ast.walk(stmt):
                if not (
                    isinstance(call, ast.Call)
                    and isinstance(call.func, ast.Attribute)
                    and call.func.attr == "requires_grad_"
                ):
                    continue
                root = _chain_root(call.func.value) or ""
                if not _false_flag(call) and (root == key or root.startswith(f"{key}.")):
                    return False  # it, or a part of it, unfrozen somewhere in the scope
                if root == key and stmt.lineno < line and _always(module, stmt, scope):
                    frozen = True
        if (
            isinstance(stmt, ast.For)
            and isinstance(stmt.iter, ast.Call)
            and last_name(stmt.iter) in ("parameters", "named_parameters")
            and isinstance(stmt.iter.func, ast.Attribute)
            and isinstance(stmt.target, ast.Name)
        ):
            owner = dotted(stmt.iter.func.value) or ""
            for inner in stmt.body:
                if (
                    isinstance(inner, ast.Assign)
                    and [dotted(t) for t in inner.targets] == [f"{stmt.target.id}.requires_grad"]
                    and isinstance(inner.value, ast.Constant)
                ):
                    if inner.value.value is not False and (
                        owner == key or owner.startswith(f"{key}.")
                    ):
                        return False
                    if (
                        owner == key
                        and stmt.lineno < line
                        and last_name(stmt.iter) == "parameters"
                        and _always(module, stmt, scope)
                    ):
                        frozen = True
    return frozen


def _always(module: Module, stmt, scope) -> bool:
    """Whether a statement runs whenever its scope does: under no `if`, loop or `try`
    (`if args.freeze: model.requires_grad_(False)` freezes on one path only)."""
    return not any(
        isinstance(outer, (ast.If, ast.Try, *LOOPS)) for outer in module.ancestors(stmt, scope)
    )


MODE_CHAIN = {"eval", "train", "to", "cuda", "cpu", "float", "half", "requires_grad_"}


def _chain_root(node) -> str | None:
    """`G` for `G.eval().requires_grad_(False).to(device)`'s receiver chain."""
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if node.func.attr not in MODE_CHAIN:
            return None
        node = node.func.value
    return dotted(node)


def _false_flag(call: ast.Call) -> bool:
    flag = call.args[0] if call.args else next((k.value for k in call.keywords), None)
    return isinstance(flag, ast.Constant) and flag.value is False


def _freezes(value) -> bool | None:
    """True when a value's call chain ends its flags with requires_grad_(False), False when with
    requires_grad_(True), None when it sets none."""
    found = None
    node = value
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if node.func.attr == "requires_grad_" and found is None:
            found = _false_flag(node)
        elif node.func.attr not in MODE_CHAIN:
            break
        node = node.func.value
    return found


def _copy_of(value) -> str | None:
    """`G` for `copy.deepcopy(G)`, maybe followed by mode calls (`.eval()`, `.to(device)`)."""
    node = value
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if node.func.attr not in MODE_CHAIN:
            break
        node = node.func.value
    if isinstance(node, ast.Call) and last_name(node) == "deepcopy" and node.args:
        return dotted(node.args[0])
    return None


def _wraps_itself(value, key: str) -> bool:
    """`sampler = torch.jit.trace(sampler, ...)`, `model = model.to(device)`: the same
    parameters under another handle."""
    if _chain_root(value) == key:
        return True
    return isinstance(value, ast.Call) and bool(value.args) and dotted(value.args[0]) == key


# Contexts that count a forward pass's operations: a measurement, not an evaluation over data.
MEASURING = {"FlopCounterMode", "FlopCountAnalysis", "ActivationCountAnalysis", "profile"}


def _measured_here(module: Module, node, stop) -> bool:
    """Whether a node runs inside `with FlopCounterMode():` (or torch.profiler.profile), or a
    `with counter:` whose name holds one, inside `stop` (open_clip's FLOP profiler)."""
    for outer in module.ancestors(node, stop):
        if not isinstance(outer, ast.With | ast.AsyncWith):
            continue
        for item in outer.items:
            expr = item.context_expr
            if isinstance(expr, ast.Name):
                expr = next(
                    (
                        n.value
                        for n in module.project.nodes_of(stop)
                        if isinstance(n, ast.Assign)
                        and any(dotted(t) == expr.id for t in n.targets)
                    ),
                    expr,
                )
            if isinstance(expr, ast.Call) and last_name(expr) in MEASURING:
                return True
    return False


def _function_alias(module: Module, func, scope) -> bool:
    """Whether a called name only ever holds another function, named without a call and not
    like a model (SlowFast's `model_stats_fun = flop_count`): it runs that function, not a
    model."""
    if not isinstance(func, ast.Name):
        return False
    values = [
        n.value
        for n in module.project.nodes_of(scope)
        if isinstance(n, ast.Assign) and any(dotted(t) == func.id for t in n.targets)
    ]
    return bool(values) and all(
        isinstance(v, ast.Name | ast.Attribute) and not _model_like(dotted(v), set())
        for v in values
    )


FACTORY_PREFIXES = ("build_", "create_", "make_", "load_", "get_", "init_", "setup_")


def _factory(func: str | None) -> bool:
    """A call named as making a model (build_model, create_model, get_model), not running one."""
    last = (func or "").rsplit(".", 1)[-1].lower()
    return last.startswith(FACTORY_PREFIXES) and last.endswith(("model", "models", "net"))


def _handed(call, helper, evaluated: set) -> set:
    """The parameters of `helper` that `call` hands a model to."""
    params = [a.arg for a in helper.args.posonlyargs + helper.args.args]
    if params and params[0] in ("self", "cls") and isinstance(call.func, ast.Attribute):
        params = params[1:]
    names = {
        params[i]
        for i, a in enumerate(call.args)
        if i < len(params) and _model_like(dotted(a), evaluated)
    }
    names |= {k.arg for k in call.keywords if _model_like(dotted(k.value), evaluated)}
    return names - {None}


def _grad_free_here(module: Module, node, stop) -> bool:
    """Whether a node runs under a `with torch.no_grad():` inside `stop`."""
    return any(
        isinstance(outer, ast.With | ast.AsyncWith) and _no_grad_with(outer)
        for outer in module.ancestors(node, stop)
    )


def grad_free_function(module: Module, function) -> bool:
    """Whether a function runs with autograd off: decorated @torch.no_grad(),
    @torch.inference_mode(), or with a decorator of the checked files that applies one
    (yolov5's @smart_inference_mode())."""
    home = module.project.module_at(function)
    return any(_no_grad_decorator(home, d) for d in function.decorator_list)


def _no_grad_decorator(module: Module, decorator) -> bool:
    if _no_grad_call(decorator):
        return True
    name = (last_name(decorator) or "").lower()
    if "no_grad" in name or "inference_mode" in name:
        return True
    call = decorator if isinstance(decorator, ast.Call) else ast.Call(decorator, [], [])
    helper = module.resolve(call, Ctx(None))
    return helper is not None and any(
        last_name(n) in ("no_grad", "inference_mode")
        for n in ast.walk(helper)
        if isinstance(n, ast.Attribute | ast.Name)
    )


def _feeds_backward(module: Module, loop, function) -> bool:
    """Whether what a loop computes is backpropagated later in its function: a style-transfer
    loop summing the loss terms that one backward() then runs from."""
    scope = function if function is not None else module.tree
    grad = backward_sources(module.project.nodes_of(scope))
    if not grad:
        return False
    assigned = {
        dotted(t)
        for n in module.project.nodes_of(loop)
        if isinstance(n, ast.Assign | ast.AugAssign)
        for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
    }
    return bool(assigned & grad)


def _over_constants(loop) -> bool:
    """A loop over a literal list or tuple of constants: `for debug in (True, False)`."""
    container = getattr(loop, "iter", None)
    return isinstance(container, ast.List | ast.Tuple | ast.Set) and all(
        isinstance(e, ast.Constant) for e in container.elts
    )


def _grad_free(module: Module, loop, function, callers: int = 3) -> bool:
    """Whether no graph is built at `loop`: under no_grad there, or wherever it is called,
    through up to three levels of callers (an evaluation helper called by a benchmark helper
    that runs under no_grad)."""
    node = loop
    while node is not None:
        if isinstance(node, ast.With | ast.AsyncWith) and _no_grad_with(node):
            return True
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if grad_free_function(module, node):
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
    calls = module.project.callers(function) or _base_callers(module, function)
    return bool(calls) and all(
        home.enclosing_function(call) is not function
        and _grad_free(home, call, home.enclosing_function(call), callers - 1)
        for call, home in calls
    )


def _base_callers(module: Module, function) -> list:
    """For a method no call of the checked files names, the calls of the method it overrides
    in a base class of the checked files: `self._generate(...)` in the base's @torch.no_grad()
    generate() runs the override (fairseq's sequence generators)."""
    cls = module.owner.get(function)
    if cls is None:
        return []
    project = module.project
    for base in cls.bases:
        found = None
        if isinstance(base, ast.Name):
            found = next(
                (n for n in module.tree.body if isinstance(n, ast.ClassDef) and n.name == base.id),
                None,
            )
            if found is None and base.id in module.imports:
                level, name, original = module.imports[base.id]
                target = project._module(module, level, name) if original else None
                if target is not None:
                    found = next(
                        (
                            n
                            for n in target.tree.body
                            if isinstance(n, ast.ClassDef) and n.name == original
                        ),
                        None,
                    )
        method = project.methods.get(found, {}).get(function.name) if found else None
        if method is not None and method is not function:
            return project.callers(method)
    return []


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


def schedulers_in_epoch_loops(module: Module):
    """R7 in an epoch loop: an epoch scheduler stepped in a loop nested in it, in the batch loop
    of a helper in another file, or before the epoch's training pass; a per-step schedule
    stepped once per epoch."""
    for loop, paths in module.loops_paths.items():
        if module.unit(loop) is not None or not has_training_pass(paths):
            continue
        for path in paths:
            trained = False
            for event in path.events:
                if event.kind == PASS:
                    trained = True
                    for inner in event.inner:
                        if inner.kind == SCHED_STEP and _epoch_scheduler_here(module, inner):
                            yield inner.node, "SCF701"
                    continue
                if event.kind != SCHED_STEP:
                    continue
                nested = _in_inner_loop(module, event.node, loop)
                if _epoch_scheduler(module, event.key):
                    if nested:
                        if _epoch_scheduler_here(module, event):
                            yield event.node, "SCF701"
                    elif not trained and not _conditional(module, event.node, loop):
                        yield event.node, "SCF702"
                elif _step_scheduler(module, event.key) and not nested:
                    yield event.node, "SCF703"


def has_training_pass(paths) -> bool:
    return any(e.kind == PASS for p in paths for e in p.events)


def _in_inner_loop(module: Module, node, loop) -> bool:
    """Whether a node runs in a loop nested in `loop` (up to its own function)."""
    for outer in module.ancestors(node, loop):
        if isinstance(outer, LOOPS + COMPREHENSIONS):
            return True
        if isinstance(outer, FUNCTIONS):
            return False
    return False


def _conditional(module: Module, node, loop) -> bool:
    """Whether a node sits under an `if` inside `loop` (or inside a helper)."""
    return any(isinstance(outer, (ast.If, *FUNCTIONS)) for outer in module.ancestors(node, loop))


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
        training = any("train" in w or w.startswith("running") for w in words)
        if training or _is_backward_loss(module, value, node):
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
        isinstance(n, ast.Call) and last_name(n) in BACKWARD_CALLS and dotted(loss_of(n)) == key
        for n in module.project.nodes_of(scope)
    )


def evaluation_in_training_mode(module: Module):
    """R10: an evaluation loop run, in an epoch loop or between steps, with the model still in
    training mode."""
    models = _model_names(module.project)
    for loop, paths in module.loops_paths.items():
        unit = module.unit(loop)
        if unit is None and not has_training_pass(paths):
            continue
        # A step loop trains what it calls; an epoch loop's passes train what they call.
        # Modules put in eval mode before the loop stay there unless a pass trains them (a
        # frozen backbone of a linear probe).
        start = dict.fromkeys(_eval_keys(module, loop, module.enclosing_function(loop)), "eval")
        if unit is not None:
            function = module.enclosing_function(loop)
            start.update(
                dict.fromkeys(module._called(loop, Ctx(function, (), (), module)), "train")
            )
        for first in paths:
            for second in paths:  # the evaluation of one epoch meets the modes of the next
                mode = dict(start)
                for path, event in [(p, e) for p in (first, second) for e in p.events]:
                    if event.kind == TRAIN_MODE and event.key:
                        for key in _same_module(module, event.key):
                            mode[key] = "train"
                    elif event.kind == EVAL_MODE and event.key:
                        for key in _same_module(module, event.key):
                            mode[key] = "eval"
                    elif event.kind == PASS:
                        for key in event.called:  # a module is in training mode unless set
                            if _is_model(key, models):
                                mode.setdefault(key, "train")
                        for key in event.trains:
                            mode[key] = "train"
                    elif event.kind == EVALUATE:
                        trained = [
                            k
                            for k in event.called
                            if mode.get(k) == "train"
                            and _is_model(k, models)
                            and not _not_run(module, event.node, k, path.decisions)
                        ]
                        if trained and _evaluation_loop(module, event.node):
                            yield event.node, "SCF1002"


def _not_run(module: Module, loop, key: str, decisions: dict) -> bool:
    """Whether, on a path that decided its conditions so, a loop never runs `key`: every call
    of it sits in a branch of an `if` the path did not take (the captioning tutorial's
    `if encoder is not None: encoder.eval()`, then the same test around `encoder(imgs)`)."""
    if not decisions:
        return False
    project = module.project
    home = project.module_at(loop)
    uses = [
        n
        for n in ast.walk(loop)
        if isinstance(n, ast.Call)
        and any(dotted(p) == key for p in (n.func, *n.args, *(k.value for k in n.keywords)))
    ]
    if not uses:
        return False
    for use in uses:
        skipped = False
        child = use
        for outer in home.ancestors(use):
            if isinstance(outer, ast.If) and outer in project.conditions:
                text, sense = project.conditions[outer]
                if text in decisions:
                    taken = decisions[text] == sense
                    if (child in outer.body) != taken:
                        skipped = True
                        break
            if outer is loop:
                break
            child = outer
        if not skipped:
            return False
    return True


# Calls that wrap a module and run it as it is: its mode is the wrapper's.
MODE_WRAPPERS = {
    "DistributedDataParallel", "DDP", "DataParallel", "compile", "FSDP",
    "FullyShardedDataParallel",
}  # fmt: skip


def _same_module(module: Module, key: str) -> set:
    """A name and the names bound, in this file, to a wrapper of it or to what it wraps
    (`ddp_model = DDP(model)`, `model = torch.compile(net)`): setting the mode of one sets
    it for all (modded-nanogpt evaluates `ddp_model` after `model.eval()`)."""
    if not hasattr(module, "wrapped_pairs"):
        pairs = set()
        for node in module.nodes:
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.value, ast.Call)
                and last_name(node.value) in MODE_WRAPPERS
                and node.value.args
            ):
                outer, inner = dotted(node.targets[0]), dotted(node.value.args[0])
                if outer and inner and outer != inner:
                    pairs.add((outer, inner))
        module.wrapped_pairs = pairs
    found, todo = {key}, [key]
    while todo:
        name = todo.pop()
        for a, b in module.wrapped_pairs:
            for x, y in ((a, b), (b, a)):
                if x == name and y not in found:
                    found.add(y)
                    todo.append(y)
    return found


def inference_in_training_mode(module: Module):
    """R10: an inference loop (under no_grad or inference_mode) that runs a model built here,
    which nothing in the checked files ever puts in eval mode: a predictor whose eval() was
    dropped."""
    evaluated = _eval_names(module.project)
    for loop, paths in module.loops_paths.items():
        if module.unit(loop) is not None or has_training_pass(paths):
            continue
        if _updates(module, loop):
            continue
        keys = [
            k
            for k in _run_keys(module, loop)
            if not any(a.rsplit(".", 1)[-1] in evaluated for a in _same_module(module, k))
        ]
        if not keys:
            continue
        function = module.enclosing_function(loop)
        if not _grad_free(module, loop, function):
            continue
        if any(_built_here(module, key, function) for key in keys):
            yield loop, "SCF1002"


def _eval_names(project) -> set:
    """The last names of everything put in eval (or training) mode, or frozen, anywhere."""
    if not hasattr(project, "eval_names"):
        project.eval_names = {
            (dotted(n.func.value) or "").rsplit(".", 1)[-1]
            for m in project.modules
            for n in m.nodes
            if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr in ("eval", "train", "requires_grad_", "eval_mode")
        } | {
            (dotted(t) or "").rsplit(".", 1)[-1]
            for m in project.modules
            for n in m.nodes
            if isinstance(n, ast.Assign)
            and isinstance(n.value, ast.Call)
            and isinstance(n.value.func, ast.Attribute)
            and n.value.func.attr in ("eval", "train")
            for t in n.targets
        }
    return project.eval_names


def _run_keys(module: Module, loop) -> set:
    """The model-like names a loop calls directly: model(x), self.model(x)."""
    return {
        key
        for node in module.project.nodes_of(loop)
        if isinstance(node, ast.Call)
        for key in [dotted(node.func)]
        if key and _model_like(key, set())
    }


def _built_here(module: Module, key: str, function) -> bool:
    """Whether a model is built by this file's code (model = Net(), self.model =
    build_model(cfg)): not handed in by a caller, which may have set its mode."""
    cls = module.owner.get(module.method_of(function)) if function is not None else None
    scopes = [module.tree] + ([function] if function is not None else [])
    if cls is not None:
        scopes += list(module.methods[cls].values())
    for scope in scopes:
        for node in module.project.nodes_of(scope):
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and dotted(node.targets[0]) == key
                and isinstance(node.value, ast.Call)
            ):
                name = dotted(node.value.func) or ""
                if "load" in name.lower() or any(dotted(a) == key for a in node.value.args):
                    continue
                last = name.rsplit(".", 1)[-1]
                if last[:1].isupper() or last.startswith(("build", "create", "make", "get_model")):
                    return True
    return False


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
