"""The checks of a run's setup: DistributedSampler.set_epoch (R15), torch.load (C3),
seeding (S1, S2)."""

import ast

from scaffold.check.epoch_checks import has_training_pass
from scaffold.check.flow import (
    BUILD,
    PASS,
    SEED,
    STEP,
    Ctx,
    Module,
    dotted,
    last_name,
)


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


def sampler_without_set_epoch(module: Module):
    """R15: a shuffling DistributedSampler whose own set_epoch() is never called: not on it, nor
    on the loader built with it (loader.sampler.set_epoch). A set_epoch() on a name this check
    cannot tie to one sampler (a helper's parameter) counts for every sampler."""
    project = module.project
    if not hasattr(project, "set_epoch_receivers"):
        project.set_epoch_receivers = {
            dotted(n.func.value) or "?"
            for m in project.modules
            for n in m.nodes
            if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr == "set_epoch"
        }
        project.sampler_names = {
            n: {_last(k) for k in _names_of(m, n)}
            for m in project.modules
            for n in m.nodes
            if isinstance(n, ast.Call) and last_name(n) == "DistributedSampler"
        }
    for node in module.nodes:
        if isinstance(node, ast.Call) and last_name(node) == "DistributedSampler":
            shuffle = next((k.value for k in node.keywords if k.arg == "shuffle"), None)
            if shuffle is not None and not (
                isinstance(shuffle, ast.Constant) and shuffle.value is True
            ):
                continue  # shuffle=False, or a setting: a validation sampler, often
            if any(w in k.lower() for k in project.sampler_names[node] for w in ("val", "test")):
                continue  # a validation order: nothing trains on it
            if not _tied(project, node):
                yield node, "SCF1501"


def _tied(project, sampler) -> bool:
    """Whether some set_epoch() may be this sampler's: called on it, on a loader built with
    it, or on a name that is not clearly another sampler's (or its loader's)."""
    own = project.sampler_names[sampler]
    home = project.module_at(sampler)
    others = set().union(
        *(
            v
            for k, v in project.sampler_names.items()
            if k is not sampler and project.module_at(k) is home
        )
    )
    for receiver in project.set_epoch_receivers:
        parts = receiver.split(".")
        if parts[-1] in ("sampler", "batch_sampler") and len(parts) > 1:
            parts = parts[:-1]  # loader.sampler.set_epoch(epoch)
        if parts[-1] in own or parts[-1] not in others:
            return True
    return False


def _last(key: str) -> str:
    return key.rsplit(".", 1)[-1]


def _names_of(module: Module, call) -> set:
    """The names a sampler goes by: what it is assigned to, and the loaders built with it."""
    names = set()
    parent = module.parents.get(call)
    if isinstance(parent, ast.keyword):  # DataLoader(ds, sampler=DistributedSampler(ds))
        parent = module.parents.get(module.parents.get(parent))
    if isinstance(parent, ast.Assign):
        names |= {dotted(t) for t in parent.targets if dotted(t)}
    if isinstance(parent, ast.IfExp):  # sampler = DistributedSampler(ds) if ddp else None
        outer = module.parents.get(parent)
        if isinstance(outer, ast.Assign):
            names |= {dotted(t) for t in outer.targets if dotted(t)}
    for node in module.nodes:  # DataLoader(ds, sampler=train_sampler)
        if isinstance(node, ast.Call) and any(
            k.arg in ("sampler", "batch_sampler") and dotted(k.value) in names
            for k in node.keywords
        ):
            up = module.parents.get(node)
            if isinstance(up, ast.Assign):
                names |= {dotted(t) for t in up.targets if dotted(t)}
    return names


def nothing_seeded(module: Module):
    """S1: an optimizer built, then trained, with no seed set before it in any caller."""
    scopes = {module.enclosing_function(loop) for loop, paths in module.loops_paths.items()
              if has_training_pass(paths) or module.unit(loop) is not None}  # fmt: skip
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


WRAPPERS = {"DistributedDataParallel", "DDP", "DataParallel"}


def compiled_state_saved(module: Module):
    """C4: the state dict of a `torch.compile`d module saved: its keys carry `_orig_mod.`, so the
    checkpoint loads only into a compiled model (or through code that strips the prefix). Read
    in source order per function (and per class for `self.` attributes): a name bound to
    `torch.compile(m)`, to such a name, to its DDP wrapper's `.module`, or to either branch of an
    `x if c else y` of them; bound to anything else (`model._orig_mod`), it is no longer one.
    `model.compile()` compiles in place and keeps the keys."""
    compiles = [call for call, _ in module.calls if _compiles(module, call)]
    if not compiles:
        return  # most files: nothing compiled, nothing to read in order
    class_compiled = {}
    scopes = set()
    for call in compiles:
        function = module.enclosing_function(call)
        scopes.add(function if function is not None else module.tree)
        node = module.parents.get(call)
        if isinstance(node, ast.IfExp):
            node = module.parents.get(node)
        if not isinstance(node, ast.Assign):
            continue
        cls = module.owner.get(module.method_of(function)) if function is not None else None
        for target in node.targets:
            key = dotted(target)
            if cls is not None and key and key.startswith("self."):
                class_compiled.setdefault(cls, set()).add(key)
                scopes.update(
                    f for f in module.function_nodes if module.owner.get(module.method_of(f)) is cls
                )
    for scope in sorted(scopes, key=lambda s: getattr(s, "lineno", 0)):
        nodes = sorted(
            (n for n in module.project.nodes_of(scope) if hasattr(n, "lineno")),
            key=lambda n: (n.lineno, n.col_offset),
        )
        cls = module.owner.get(module.method_of(scope)) if scope is not module.tree else None
        compiled = set(class_compiled.get(cls, ()))
        wrapped = set()
        for node in nodes:
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                key = dotted(node.targets[0])
                if key is None:
                    continue
                value = node.value
                kind = _compiled_kind(module, value, compiled, wrapped)
                conditional = any(isinstance(a, ast.If) for a in module.ancestors(node, scope))
                if not conditional:
                    compiled.discard(key)
                    wrapped.discard(key)
                if kind == "compiled":
                    compiled.add(key)
                elif kind == "wrapped":
                    wrapped.add(key)
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "state_dict"
                and dotted(node.func.value) in compiled
                and _saved(module, node, scope)
            ):
                yield node, "SCF2401"


def _compiles(module: Module, value) -> bool:
    """`torch.compile(model, ...)`, or `compile(model)` imported from torch."""
    if not isinstance(value, ast.Call) or not value.args:
        return False
    name = dotted(value.func)
    if name == "torch.compile":
        return True
    return name == "compile" and module.imports.get("compile", (0, "", None))[1] == "torch"


def _compiled_kind(module: Module, value, compiled: set, wrapped: set) -> str | None:
    """compiled, wrapped (a DDP of a compiled module) or None, for an assigned value."""
    if isinstance(value, ast.IfExp):
        kinds = {_compiled_kind(module, v, compiled, wrapped) for v in (value.body, value.orelse)}
        return "compiled" if "compiled" in kinds else ("wrapped" if "wrapped" in kinds else None)
    if _compiles(module, value):
        return "compiled"
    key = dotted(value)
    if key in compiled:
        return "compiled"
    if key in wrapped:
        return "wrapped"
    if (
        isinstance(value, ast.Attribute)
        and value.attr == "module"
        and dotted(value.value) in wrapped
    ):
        return "compiled"
    if (
        isinstance(value, ast.Call)
        and last_name(value) in WRAPPERS
        and value.args
        and dotted(value.args[0]) in compiled
    ):
        return "wrapped"
    return None


def _saved(module: Module, call, scope) -> bool:
    """Whether a state_dict() is written to a file: given to a save call (torch.save,
    accelerator.save, save_checkpoint), directly or through the name or dict it is put in."""
    held = set()
    node = module.parents.get(call)
    while node is not None and node is not scope:
        if isinstance(node, ast.Call) and _is_save(node):
            return True
        if isinstance(node, ast.Assign):
            for target in node.targets:
                base = target.value if isinstance(target, ast.Subscript) else target
                if dotted(base):
                    held.add(dotted(base))
            break
        if isinstance(node, ast.stmt):
            break
        node = module.parents.get(node)
    if not held:
        return False
    return any(
        isinstance(n, ast.Call)
        and _is_save(n)
        and any(
            dotted(x) in held
            for a in [*n.args, *(k.value for k in n.keywords)]
            for x in ast.walk(a)
        )  # fmt: skip
        for n in module.project.nodes_of(scope)
    )


def _is_save(call) -> bool:
    name = (last_name(call) or "").lower()
    return name in ("save", "save_file") or name.startswith("save_checkpoint")
