"""The checks of one training step: R1-R6 (order, moves, AMP), R11 (losses kept), R14."""

import ast

from scaffold.check.flow import (
    BACKWARD,
    CLIP,
    COMPREHENSIONS,
    EMA,
    FUNCTIONS,
    LOOPS,
    OPTIMIZERS,
    PASS,
    STEP,
    UNSCALE,
    UPDATE,
    ZERO,
    Ctx,
    Module,
    backward_sources,
    dotted,
    last_name,
    loss_of,
)

# Reading a tensor into Python, or cutting it from its graph, frees the graph (R11).
SAFE_READS = {"item", "detach", "tolist", "numpy", "data"}
SAFE_CALLS = {"float", "int", "bool", "str", "repr", "len", "round"}


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
        gating = {e.node for e in events if e.kind == CLIP and _gates_step(module, e.node)}
        placed = _placed_clips(unit.paths)
        for path in unit.paths:
            yield from _path_order([e for e in path.events if e.kind != PASS], gating, placed)


def _placed_clips(paths) -> set:
    """The clipping calls that some path reaches right after a backward() and before the step:
    where gradients exist, they are in place. On a path that runs no backward() at all (a flag
    skipped it: llm.c's `if not args.inference_only: loss.backward()`), the same clip and step
    run on no gradients, in their right order; that path is no misplaced clip."""
    placed = set()
    for path in paths:
        events = [e for e in path.events if e.kind in (BACKWARD, STEP, ZERO, CLIP)]
        for i, event in enumerate(events):
            if event.kind != CLIP:
                continue
            before = next((e.kind for e in reversed(events[:i]) if e.kind != CLIP), None)
            after = next((e.kind for e in events[i + 1 :] if e.kind != CLIP), None)
            if before == BACKWARD and after == STEP:
                placed.add(event.node)
    return placed


def _gates_step(module: Module, clip) -> bool:
    """Whether the norm a clipping call returns decides whether the step runs
    (`grad_norm = clip_grad_norm_(...)`, then `if math.isnan(grad_norm): skip` else step, as
    ESPnet-style recipes do): a path that clips and then zeroes without stepping is that skip,
    on purpose."""
    parent = module.parents.get(clip)
    if not (isinstance(parent, ast.Assign) and len(parent.targets) == 1):
        return False
    name = dotted(parent.targets[0])
    scope = module.enclosing_function(clip) or module.tree
    for node in module.project.nodes_of(scope):
        if isinstance(node, ast.If) and name in {dotted(n) for n in ast.walk(node.test)}:
            if any(
                isinstance(n, ast.Call) and last_name(n) == "step"
                for branch in (node.body, node.orelse)
                for stmt in branch
                for n in ast.walk(stmt)
            ):
                return True
    return False


STEP_NAMES = ("step", "batch", "train", "update", "iter", "fit", "optimi")


def _repeats(module: Module, unit) -> bool:
    """Whether a step runs again and again: a loop, a function named like a training step, or
    one called from a loop. A function that runs backward() and step() once (a gradient check
    in a test) has no earlier gradients to clear."""
    if unit.node is not unit.function:
        return True
    name = unit.function.name.lower()
    # A test that steps once with made-up gradients is no training step, whatever its name.
    if not name.startswith("test") and any(word in name for word in STEP_NAMES):
        return True
    return any(
        isinstance(node, LOOPS + COMPREHENSIONS)
        for call, home in module.project.callers(unit.function)
        for node in home.ancestors(call)
    )


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


def _path_order(events: list, gating=frozenset(), placed=frozenset()):
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
    backward_run = any(e.kind == BACKWARD for e in events)
    for i, event in enumerate(events):
        if event.kind != CLIP:
            continue
        if not backward_run and event.node in placed:
            continue  # no backward on this path: the step it comes before has nothing either
        order = {BACKWARD, STEP, ZERO}
        before = kind(last(order, i, misplaced))
        after = kind(first(order, i, misplaced))
        if any(e.kind == STEP and e in misplaced for e in events[:i]):
            after = None  # a step moved before backward: the clip's window is that bug's
        if (
            before in (STEP, ZERO)
            or (before is None and after in (BACKWARD, ZERO))
            or (before == BACKWARD and after == ZERO and event.node not in gating)
        ):
            yield event.node, "SCF401"
            continue
        backward = last({BACKWARD}, i)
        if backward is not None and backward.scaled:
            start = events.index(backward)
            if not any(e.kind == UNSCALE for e in events[start:i]):
                yield event.node, "SCF501"


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
        nodes = module.project.nodes_of(unit.node)
        feeding = backward_sources(nodes)  # style_loss += mse(...) then (c + style_loss).backward()
        for node in nodes:
            if (
                _keeps(node, names)
                and _target(node) not in feeding
                and not _grad_free_here(module, node, unit.node)
            ):
                yield node, "SCF1101"


def _grad_free_here(module: Module, node, stop) -> bool:
    """Whether a node runs under `with torch.no_grad():` (or inference_mode) inside `stop`: a
    loss made there has no graph, so keeping it as a tensor (`val_loss += loss` for an
    all_reduce) holds nothing but its value."""
    return any(
        isinstance(outer, ast.With | ast.AsyncWith)
        and any(last_name(i.context_expr) in ("no_grad", "inference_mode") for i in outer.items)
        for outer in module.ancestors(node, stop)
    )


def _target(node) -> str | None:
    if isinstance(node, ast.AugAssign):
        return dotted(node.target)
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        return dotted(node.targets[0])
    return None


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
        and node.func.attr in ("append", "extend", "insert", "update")
    ):
        # losses.append(loss); meter.update(loss, n), logger.update(loss=loss): an average
        # meter keeps a running sum, and with it every step's graph
        values = [*node.args, *(k.value for k in node.keywords if k.arg is not None)]
        return any(isinstance(v, ast.Name) and v.id in names for v in values) or any(
            _bare(arg, names) for arg in node.args if node.func.attr != "update"
        )
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
    if isinstance(node, ast.Call) and _loss_call(node):
        return True  # total += criterion(out, y): a loss tensor kept without a name
    return any(_bare(child, names) for child in ast.iter_child_nodes(node))


LOSS_FUNCTIONS = {
    "cross_entropy", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss",
    "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div",
}  # fmt: skip


def _loss_call(call: ast.Call) -> bool:
    """criterion(out, y), loss_fn(out, y), F.cross_entropy(out, y): a call that makes a loss."""
    name = (last_name(call) or "").lower()
    if not call.args or name[:1].isupper() or not name:
        return False
    return name in LOSS_FUNCTIONS or name in ("criterion", "loss_fn", "loss_func", "compute_loss")


# Wrappers that replace a module's parameters by new (flat or sharded) ones.
SHARDING = {"FSDP", "FullyShardedDataParallel", "fully_shard"}


def optimizer_before_move(module: Module):
    """R1: a parameter the optimizer holds replaced after the optimizer was built, before it is
    used. Since torch 2.0 `Module.to()`, `.cuda()`, `.half()` and `.float()` keep each
    Parameter object (they swap its data), so moving or casting a module after building its
    optimizer is fine; what breaks is a new object where an old one was: a submodule or
    Parameter assigned (`model.fc = nn.Linear(...)`), the model rebuilt (`model = Net()`),
    sharded by FSDP, or a tensor the optimizer was given re-bound (`w = w.to(device)` makes a
    new tensor; the optimizer keeps the old leaf)."""
    built = {}  # scope -> [(what it holds, is it a module, optimizer key, line)]
    for node in module.nodes:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            target = dotted(node.targets[0])
            if not target:
                continue
            scope = module.enclosing_function(node) or module.tree
            for model in _optimizer_models(module, node.value):
                built.setdefault(scope, []).append((model, True, target, node.lineno))
            for tensor in _optimizer_tensors(module, node.value):
                built.setdefault(scope, []).append((tensor, False, target, node.lineno))
    for scope, optimizers in built.items():
        nodes = list(module.project.nodes_of(scope))
        for node in nodes:
            for held, is_module, optimizer, line in optimizers:
                if getattr(node, "lineno", 0) <= line or not _replaces(node, held, is_module):
                    continue
                if _used_after(module, scope, nodes, node, optimizer):
                    yield node, "SCF101"
                    break


def _replaces(node, held: str, is_module: bool) -> bool:
    """Whether a statement puts a new object where the optimizer's parameters were."""
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        call = node.value  # fully_shard(model): the module's parameters become new DTensors
        return (
            is_module
            and last_name(call) in SHARDING
            and any(dotted(a) == held for a in call.args[:1])
        )
    if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
        return False
    target, value = dotted(node.targets[0]), node.value
    if target is None or not isinstance(value, ast.Call):
        return False
    if not is_module:
        return target == held  # w = w.to(device): a new tensor, not the optimizer's leaf
    if target == held:
        if last_name(value) in SHARDING:
            return True
        # model = model.to(device), DDP(model), torch.compile(model): the same parameters;
        # model = task.get_trainable_module(): a name this check cannot follow
        if any(dotted(n) == held for n in ast.walk(value)):
            return False
        name = last_name(value) or ""
        return name[:1].isupper() or name.startswith(("build", "create", "make", "get_model"))
    if target.startswith(held + "."):
        name = last_name(value) or ""
        # model.fc = nn.Linear(...), model.w = nn.Parameter(...): a new module or Parameter
        return name[:1].isupper() and target.rsplit(".", 1)[-1] not in ("device", "dtype")
    return False


def _used_after(module: Module, scope, nodes, node, optimizer: str) -> bool:
    """Whether the optimizer is used after `node`: named in its scope, or, at module level, in
    a function called later that reads it as a global."""
    later = sorted(
        (n for n in nodes if getattr(n, "lineno", 0) > node.end_lineno),
        key=lambda n: (n.lineno, n.col_offset),
    )
    uses = [n for n in later if dotted(n) == optimizer]
    if uses:
        # optimizer = SGD(model.parameters()) again: rebuilt for the new parameters
        return not isinstance(getattr(uses[0], "ctx", None), ast.Store)
    if scope is not module.tree:
        return False
    for n in later:
        if isinstance(n, ast.Call):
            target = module.resolve(n, Ctx(None))
            if target is not None and any(dotted(x) == optimizer for x in ast.walk(target)):
                return True
    return False


def _optimizer_tensors(module: Module, call: ast.Call) -> set:
    """The tensors an optimizer is given by name: SGD([w, b], lr=0.1)."""
    classes = module.constructed(call)
    if not (classes and classes <= OPTIMIZERS) or not call.args:
        return set()
    first = call.args[0]
    if not isinstance(first, ast.List | ast.Tuple):
        return set()
    return {e.id for e in first.elts if isinstance(e, ast.Name)}


def _optimizer_models(module: Module, call: ast.Call) -> set:
    """The models whose parameters an optimizer is built from: `model.parameters()`, a helper's
    parameter groups (`param_groups(model, wd)`), or a builder given the model."""
    classes = module.constructed(call)
    helper = "optim" in (last_name(call) or "").lower()
    if not (classes and classes <= OPTIMIZERS) and not helper:
        return set()
    models = set()
    for node in ast.walk(call):
        if isinstance(node, ast.Call) and last_name(node) in ("parameters", "named_parameters"):
            if isinstance(node.func, ast.Attribute) and dotted(node.func.value):
                models.add(dotted(node.func.value))
        elif isinstance(node, ast.Call) and node is not call:
            for arg in node.args:  # param_groups_weight_decay(model, wd)
                key = dotted(arg)
                if key and any(w in key.rsplit(".", 1)[-1].lower() for w in ("model", "net")):
                    models.add(key)
    if helper and not models:  # build_optimizer(model, cfg), model.configure_optimizers(...)
        models = {
            dotted(arg)
            for arg in call.args
            if dotted(arg) and module.kind(dotted(arg)) != "optimizer"  # auto_optim(optimizer)
        }
        owner = call.func.value if isinstance(call.func, ast.Attribute) else None
        if dotted(owner) and any(w in dotted(owner).lower() for w in ("model", "net")):
            models.add(dotted(owner))
    return models


def _related(key: str, model: str) -> bool:
    return key == model or key.startswith(model + ".") or model.startswith(key + ".")


def autocast_around_update(module: Module):
    """R6: backward() or the optimizer step inside an autocast block."""
    for unit in module.steps():
        for path in unit.paths:
            for event in path.events:
                if event.kind in (BACKWARD, STEP) and _under_autocast(module, event.node):
                    yield event.node, "SCF601"


def _under_autocast(module: Module, node) -> bool:
    """Whether a node runs inside a `with ...autocast(...)` of its own function, or a `with
    ctx:` whose name was set to one (`ctx = nullcontext() if cpu else torch.autocast(...)`)."""
    for outer in module.ancestors(node):
        if isinstance(outer, FUNCTIONS):
            return False
        if isinstance(outer, ast.With | ast.AsyncWith):
            for item in outer.items:
                call = item.context_expr
                if last_name(call) == "autocast" and not _switched_off(call):
                    return True
                if isinstance(call, ast.Name) and _names_autocast(module, call, outer):
                    return True
    return False


def _names_autocast(module: Module, name: ast.Name, where) -> bool:
    scope = module.enclosing_function(where)
    for home in (scope, None) if scope is not None else (None,):
        for n in module.project.nodes_of(home if home is not None else module.tree):
            if (
                isinstance(n, ast.Assign)
                and any(dotted(t) == name.id for t in n.targets)
                and any(
                    isinstance(c, ast.Call) and last_name(c) == "autocast" and not _switched_off(c)
                    for c in ast.walk(n.value)
                )
            ):
                return True
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
        if _built_for_one_precision(module, node, scope):
            continue
        if _may_use_bf16(module, scope):
            yield node, "SCF602"


def _built_for_one_precision(module: Module, node, scope) -> bool:
    """Whether a GradScaler is built only under an `if` that picks one precision that is not
    bfloat16: `if args.precision == "amp":`, `if dtype == torch.float16:`, or a name set only
    to such tests (open_clip's `need_scaler = args.precision == "amp"`). As `enabled=` with a
    flag, it is on for that choice alone. A bare flag (`if args.amp:`) picks no dtype: the
    scaler may still run beside bfloat16, and is reported."""
    for outer in module.ancestors(node, scope):
        if isinstance(outer, ast.If) and _in_body(module, node, outer):
            if _picks_non_bf16(module, outer.test, scope):
                return True
    return False


def _in_body(module: Module, node, branch: ast.If) -> bool:
    inside = node
    while inside is not None and module.parents.get(inside) is not branch:
        inside = module.parents.get(inside)
    return inside is not None and inside in branch.body


def _picks_non_bf16(module: Module, test, scope, depth: int = 0) -> bool:
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return any(_picks_non_bf16(module, v, scope, depth) for v in test.values)
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        op, right = test.ops[0], test.comparators[0]
        values = []
        if isinstance(op, ast.Eq):
            values = [test.left, right]
        elif isinstance(op, ast.In) and isinstance(right, ast.Tuple | ast.List | ast.Set):
            values = list(right.elts)
        chosen = [v for v in values if _precision_value(v)]
        return bool(chosen) and not any(map(_names_bf16, ast.walk(test)))
    if isinstance(test, ast.Name) and depth < 2:
        sets = [
            n.value
            for n in module.project.nodes_of(scope)
            if isinstance(n, ast.Assign) and any(dotted(t) == test.id for t in n.targets)
        ]
        return bool(sets) and all(_picks_non_bf16(module, v, scope, depth + 1) for v in sets)
    return False


def _precision_value(node) -> bool:
    """A string constant, or `torch.float16`/`torch.half`: one precision named."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return True
    return isinstance(node, ast.Attribute) and node.attr in ("float16", "half")


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


def accumulation_without_division(module: Module):
    """R14: the optimizer steps every k-th batch and each batch's loss is not divided by k. Only
    a remainder test counts as every k-th here: yolov5's `ni - last_opt_step >= accumulate`
    sums losses that its loss function scales by the batch size, by design (tried for issue 27:
    its pattern, copied without yolov5's `loss *= WORLD_SIZE`, was reported)."""
    for unit in module.steps():
        events = [e for p in unit.paths for e in p.events]
        steps = [e for e in events if e.kind == STEP]
        if not steps:
            continue
        every_kth = all(_every_kth(module, e.node, unit.node) for e in steps)
        micro = all(_micro_loop(module, e.node, unit.node, steps) for e in events
                    if e.kind == BACKWARD)  # fmt: skip
        if not (every_kth or micro):
            continue
        for event in events:
            if event.kind == BACKWARD and not _divided(module, event, unit):
                yield event.node, "SCF1401"


def _micro_loop(module: Module, node, stop, steps) -> bool:
    """Whether a backward() runs in a loop of its own inside the step (nanoGPT's micro-steps)
    that no optimizer step is in: several backward() calls per update."""
    for outer in module.ancestors(node, stop):
        if isinstance(outer, FUNCTIONS):
            return False
        if isinstance(outer, LOOPS):
            inside = set(module.project.nodes_of(outer))
            return not any(e.node in inside for e in steps)
    return False


def _every_kth(module: Module, node, stop) -> bool:
    """Whether a node runs under an `if ... % k` inside `stop`, or is a loss scaler's call told
    to update only every k-th time (update_grad=(i + 1) % k == 0)."""
    if isinstance(node, ast.Call) and any(
        isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod)
        for k in node.keywords
        for n in ast.walk(k.value)
    ):
        return True
    return any(
        isinstance(outer, ast.If)
        and any(
            isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod) for n in ast.walk(outer.test)
        )
        for outer in module.ancestors(node, stop)
    )


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
        # `with amp.scale_loss(loss, opt) as scaled_loss:`: the loss it was made from
        if isinstance(n, ast.withitem) and dotted(n.optional_vars) == key:
            inner = [dotted(a) for a in getattr(n.context_expr, "args", [])[:1]]
            if inner and inner[0]:
                key = inner[0]
    params = scope.args if isinstance(scope, FUNCTIONS) else None
    if (
        params is not None
        and key in {a.arg for a in params.posonlyargs + params.args + params.kwonlyargs}
        and not any(
            isinstance(n, ast.Assign | ast.AugAssign)
            and key in {dotted(t) for t in (n.targets if isinstance(n, ast.Assign) else [n.target])}
            for n in module.project.nodes_of(scope)
        )
    ):
        return True  # a loss handed in by the caller, made (and divided) where this cannot see
    if _grads_divided(module, scope):
        return True
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


def _grads_divided(module: Module, scope) -> bool:
    """Whether the function divides the accumulated gradients themselves before the step
    (modded-nanogpt's `for p in model.parameters(): p.grad /= k`, or `p.grad.div_(k)`): the
    same mean as dividing each micro-batch's loss."""
    nodes = list(module.project.nodes_of(scope))
    # The accumulation count: what a loop's range or an every-k-th `% k` test reads. A
    # division by anything else (`p.grad /= world_size` after a hand-written all_reduce) is
    # not the accumulation's mean.
    counts = {
        dotted(n)
        for node in nodes
        if isinstance(node, ast.For | ast.AsyncFor)
        or (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod))
        for n in ast.walk(node.iter if isinstance(node, ast.For | ast.AsyncFor) else node.right)
        if isinstance(n, ast.Name | ast.Attribute)
    } - {None}
    for n in nodes:
        if (
            isinstance(n, ast.AugAssign)
            and isinstance(n.op, ast.Div | ast.Mult)
            and _is_grad(n.target)
            and _reads(n.value, counts)
        ):
            return True
        if (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr in ("div_", "mul_")
            and _is_grad(n.func.value)
            and any(_reads(a, counts) for a in n.args)
        ):
            return True
    return False


def _reads(node, names: set) -> bool:
    return any(
        dotted(n) in names for n in ast.walk(node) if isinstance(n, ast.Name | ast.Attribute)
    )


def _is_grad(node) -> bool:
    """`p.grad` or `p.grad.data`."""
    if isinstance(node, ast.Attribute) and node.attr == "data":
        node = node.value
    return isinstance(node, ast.Attribute) and node.attr == "grad"


def accumulation_cadence(module: Module):
    """R14/R2: in a loop that accumulates gradients (backward() every micro-batch, the optimizer
    step only every k-th), zero_grad() run every micro-batch erases what was accumulated, so each
    step sees the last micro-batch alone (SCF1402); the reverse, step() every micro-batch while
    zero_grad() waits for the k-th, applies the first micro-batch's gradients again at every step
    (SCF1403). Only calls written in the loop itself are read (not in helpers it calls): a
    wrapper that decides itself when to step (Accelerate's `accumulate()`) writes both
    unconditionally and is left alone."""
    for unit in module.steps():
        if unit.node is unit.function:
            continue
        events = [e for p in unit.paths for e in p.events]
        own = set(module.project.nodes_of(unit.node))
        backwards = [e for e in events if e.kind == BACKWARD and e.node in own]
        steps = [e for e in events if e.kind == STEP and e.node in own and e.key != "<manual>"]
        zeros = [e for e in events if e.kind == ZERO and e.node in own]
        if not (backwards and steps and zeros):
            continue
        # nanoGPT's micro-steps: backward() in a loop of its own that runs no step; a
        # zero_grad() on every pass of that loop leaves the last micro-batch's gradients alone
        micro = {}
        for event in backwards:
            inner = _inner_loop(module, event.node, unit.node)
            if inner is None:
                continue
            body = set(module.project.nodes_of(inner))
            # A loop that reads .grad on each pass harvests per-task gradients (PCGrad): its
            # zero_grad() is how it separates them.
            reads = any(isinstance(n, ast.Attribute) and n.attr == "grad" for n in body)
            if not reads and not any(e.node in body for e in steps):
                micro[inner] = True
        flagged = False
        for inner in micro:
            for event in zeros:
                if _always(module, event.node, inner) and not _between(unit, event.node):
                    if any(_clears(module, event.key, e.key) for e in steps):
                        yield event.node, "SCF1402"
                        flagged = True
                        break
        if flagged:
            continue
        if not any(_always(module, e.node, unit.node) for e in backwards):
            continue  # no backward() on every micro-batch: no accumulation here
        # Every optimizer steps every k-th micro-batch only: a GAN whose generator steps every
        # n-th batch while its discriminator steps every batch is no accumulation.
        if all(_kth(module, e.node, unit.node) for e in steps):
            for event in zeros:
                if (
                    _always(module, event.node, unit.node)
                    and any(_clears(module, event.key, e.key) for e in steps)
                    and not _between(unit, event.node)  # SCF201 already says it
                ):
                    yield event.node, "SCF1402"
                    break
            continue
        for key in {e.key for e in steps}:
            mine = [e for e in steps if e.key == key]
            cleared = [e for e in zeros if _clears(module, e.key, key)]
            if cleared and all(_kth(module, e.node, unit.node) for e in cleared):
                for event in mine:
                    if _always(module, event.node, unit.node) and not _early(unit, event.node):
                        yield event.node, "SCF1403"
                        break


def _inner_loop(module: Module, node, stop):
    """The innermost loop a node runs in inside `stop`, if it sits in one there."""
    for outer in module.ancestors(node, stop):
        if isinstance(outer, FUNCTIONS):
            return None
        if isinstance(outer, LOOPS):
            return outer
    return None


def _between(unit, node) -> bool:
    """Whether a zero_grad() runs between a backward() and a step() on some path."""
    for path in unit.paths:
        events = [e for e in path.events if e.kind in (BACKWARD, STEP, ZERO)]
        for i, event in enumerate(events):
            if event.node is not node:
                continue
            before = next((e.kind for e in reversed(events[:i]) if e.kind != ZERO), None)
            after = next((e.kind for e in events[i + 1 :] if e.kind != ZERO), None)
            if before == BACKWARD and after == STEP:
                return True
    return False


def _early(unit, node) -> bool:
    """Whether a step() runs before every backward() on some path (SCF301 already says it)."""
    for path in unit.paths:
        kinds = [(e.node, e.kind) for e in path.events if e.kind in (BACKWARD, STEP)]
        for i, (at, _) in enumerate(kinds):
            if at is node and all(kind != BACKWARD for _, kind in kinds[:i]):
                if any(kind == BACKWARD for _, kind in kinds[i + 1 :]):
                    return True
    return False


def _clears(module: Module, zero_key, optimizer) -> bool:
    """Whether a zero_grad() may clear an optimizer's gradients: its own, a model's, or one the
    check cannot name."""
    if zero_key is None or optimizer is None or zero_key == optimizer:
        return True
    if module.kind(zero_key) == "optimizer":
        return False
    models = {
        model
        for call in module.constructors.get(optimizer, ())
        for model in _optimizer_models(module, call)
    }
    if models:
        return any(_related(zero_key, model) for model in models)
    others = {
        model
        for key, calls in module.constructors.items()
        if key != optimizer
        for call in calls
        for model in _optimizer_models(module, call)
    }
    return zero_key not in others  # a model no other optimizer is known to be built from


def _always(module: Module, node, loop) -> bool:
    """Whether a node runs on every pass through `loop`: in its body, under no condition, try
    or nested loop (a `with` block runs its body every time)."""
    for outer in module.ancestors(node, loop):
        if isinstance(outer, ast.If | ast.IfExp | ast.Try | ast.ExceptHandler | ast.BoolOp):
            return False
        if isinstance(outer, LOOPS + COMPREHENSIONS + FUNCTIONS):
            return False
    return True


def _kth(module: Module, node, loop) -> bool:
    """Whether a node runs every k-th pass only: under an `if` that tests a remainder
    (`(i + 1) % k == 0`) or compares with an accumulation count (yolov5's
    `ni - last_opt_step >= accumulate`), or a loss scaler told so (`update_grad=`)."""
    if _every_kth(module, node, loop):
        return True
    return any(
        isinstance(outer, ast.If)
        and any(
            "accum" in (dotted(n) or "").rsplit(".", 1)[-1].lower()
            for n in ast.walk(outer.test)
            if isinstance(n, ast.Name | ast.Attribute)
        )
        for outer in module.ancestors(node, loop)
    )


def ema_before_step(module: Module):
    """R3: a weight average (EMA, SWA) updated before the optimizer step of the same iteration:
    it averages the weights of the step before, and never sees the last one."""
    for unit in module.steps():
        seen = set()
        for path in unit.paths:
            events = [e for e in path.events if e.kind in (EMA, STEP)]
            for i, event in enumerate(events):
                if event.kind != EMA or event.node in seen:
                    continue
                if any(e.kind == STEP for e in events[:i]):
                    continue
                if any(e.kind == STEP for e in events[i + 1 :]):
                    seen.add(event.node)
                    yield event.node, "SCF302"
