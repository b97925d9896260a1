"""How one file's training code runs: what its objects are, its events in order, its steps.

A Module reads one file; the Project (project.py) it belongs to holds what the checked files
share, so a call to a helper imported from another checked file is read like a local one."""

import ast
from dataclasses import dataclass, field

# Beyond this many paths through one loop body the rest are dropped: the first ones, taken in
# source order, already cover each branch once, and a linter must stay fast.
MAX_PATHS = 64
# Helpers are followed this deep; deeper calls are opaque.
MAX_DEPTH = 6

OPTIMIZERS = {
    "SGD", "Adam", "AdamW", "Adamax", "Adagrad", "Adadelta", "RMSprop", "Rprop", "ASGD",
    "LBFGS", "NAdam", "RAdam", "SparseAdam", "Adafactor", "Optimizer",
}  # fmt: skip
PLATEAU = "ReduceLROnPlateau"
# Schedulers whose length is counted in epochs unless their arguments say otherwise.
EPOCH_SCHEDULERS = {"StepLR", "MultiStepLR", "ExponentialLR", "CosineAnnealingLR"}
# Warm-up schedules of Transformers and Diffusers, whose lengths are counted in optimizer steps
# by their API (num_warmup_steps, num_training_steps).
WARMUP_FACTORIES = {
    "get_linear_schedule_with_warmup", "get_cosine_schedule_with_warmup",
    "get_constant_schedule_with_warmup", "get_polynomial_decay_schedule_with_warmup",
    "get_cosine_with_hard_restarts_schedule_with_warmup", "get_inverse_sqrt_schedule",
    "get_wsd_schedule",
}  # fmt: skip
SCHEDULERS = EPOCH_SCHEDULERS | WARMUP_FACTORIES | {
    PLATEAU, "OneCycleLR", "CyclicLR", "LambdaLR", "MultiplicativeLR", "LinearLR", "ConstantLR",
    "PolynomialLR", "CosineAnnealingWarmRestarts", "SequentialLR", "ChainedScheduler",
    "LRScheduler", "_LRScheduler",
}  # fmt: skip
SCALERS = {"GradScaler"}
BACKWARD_CALLS = {"backward", "manual_backward"}
GENERATORS = {"Generator"}
# Calls that seed torch's global generator: torch.manual_seed, or a library's seed_everything
# (Lightning, Accelerate, Transformers). A helper of the checked files with such a name is read
# instead, since it may seed only random and numpy. On a torch.Generator, manual_seed seeds
# only that generator; random.seed and torch.seed() do not give torch a fixed seed.
SEEDS = {
    "manual_seed", "seed_all", "seed_everything", "set_seed", "set_random_seed", "fix_seed",
    "seed_torch",
}  # fmt: skip
# The classes that keep an average of a model's weights: torch's AveragedModel, timm's ModelEma*,
# yolov5's ModelEMA, ema_pytorch's EMA, torch_ema's ExponentialMovingAverage.
EMA_CLASSES = {"AveragedModel", "ModelEma", "ModelEmaV2", "ModelEmaV3", "ModelEMA", "EMA",
               "ExponentialMovingAverage", "EMAModel"}  # fmt: skip
TRACKED = OPTIMIZERS | SCHEDULERS | SCALERS | GENERATORS | EMA_CLASSES
CLIPS = {"clip_grad_norm_", "clip_grad_value_", "clip_grad_norm", "clip_grad_value"}
# Methods that move a module or change its dtype.
MOVES = {"to", "cuda", "half", "float", "double", "bfloat16", "to_empty"}
# Wrappers whose backward(loss) takes the loss as an argument (Accelerate, Fabric, Lightning).
BACKWARD_WRAPPERS = {"accelerator", "fabric", "engine"}

# Event kinds, in the order a step runs them.
ZERO, BACKWARD, UNSCALE, CLIP, STEP = "zero", "backward", "unscale", "clip", "step"
SCHED_STEP, TRAIN_MODE, EVAL_MODE, PASS = "sched_step", "train", "eval", "pass"
UPDATE = "update"  # scaler.update()
EMA = "ema"  # ema.update(model), swa_model.update_parameters(model): an average of the weights
EVALUATE = "evaluate"  # a loop that runs no training step: validation, test, inference
SEED, BUILD = "seed", "build"  # torch's generator seeded; a model or an optimizer constructed


FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
LOOPS = (ast.For, ast.AsyncFor, ast.While)
COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def dotted(node) -> str | None:
    """`self.model.fc` for that expression; None for anything but names and attributes."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def last_name(node) -> str | None:
    """The called name: `StepLR` for torch.optim.lr_scheduler.StepLR(...)."""
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def _fails(node) -> bool:
    """`assert False` (or `assert 0`): an error path, as a raise is."""
    return (
        isinstance(node, ast.Assert) and isinstance(node.test, ast.Constant) and not node.test.value
    )


def prefixes(key: str) -> list[str]:
    """`a.b.c` -> [a, a.b, a.b.c]."""
    parts = key.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


@dataclass
class Event:
    """A call that matters to a training step, where it is, and on what."""

    kind: str
    node: ast.AST
    key: str | None = None  # the receiver: optimizer, model or scheduler
    scaled: bool = False  # a backward() through scaler.scale(...), a step through scaler.step
    closure: bool = False  # a step given a closure, which runs its own backward
    has_args: bool = False  # a scheduler step given a value
    unit: "Unit | None" = None  # a PASS: the training step that runs here
    keys: frozenset = frozenset()  # a PASS: the names its step runs (calls, or hands on)
    trains: frozenset = frozenset()  # a PASS: the modules it puts in training mode itself
    called: frozenset = frozenset()  # a PASS or EVALUATE: the names it calls, model(x)
    inner: tuple = ()  # a PASS: its step's events, named as here
    frozen: frozenset = frozenset()  # a PASS: the names it runs only under no_grad (a teacher)


@dataclass
class Path:
    """One way through a body: its events, the branch taken at each condition, how it ended."""

    events: list = field(default_factory=list)
    decisions: dict = field(default_factory=dict)
    done: str | None = None  # "loop" (continue), "break" or "return"

    def copy(self) -> "Path":
        return Path(list(self.events), dict(self.decisions), self.done)


@dataclass
class Unit:
    """A training step: a loop body, or a function, in which backward() and step() both run."""

    node: ast.AST  # the loop, or the function
    function: ast.AST | None  # the function it sits in; None at module level
    paths: list
    in_epoch_loop: bool = False  # run from another loop of this file: it is the batch loop


@dataclass(frozen=True)
class Ctx:
    """Where events are read: the names a helper's parameters stand for, the calls open."""

    function: ast.AST | None
    subst: tuple = ()  # (parameter, caller's key or None) pairs
    stack: tuple = ()
    root: "Module | None" = None  # the file the reading started in: where keys are named

    def key(self, key: str | None) -> str | None:
        """The caller's name for a key read inside a helper."""
        if key is None:
            return None
        head, _, rest = key.partition(".")
        for name, value in self.subst:
            if name == head:
                return None if value is None else (f"{value}.{rest}" if rest else value)
        return key


def _operands(test) -> tuple:
    """("and" or "or", [(identity, sense)] of its operands) for a boolean test; else ("", [])."""
    if isinstance(test, ast.BoolOp):
        kind = "and" if isinstance(test.op, ast.And) else "or"
        return kind, [condition(v) for v in test.values]
    return "", []


def _implied(test, parts, decisions: dict) -> bool | None:
    """Whether a boolean test is decided by what a path already decided of its operands: an
    `and` one of whose operands was false, an `or` one of whose operands was true."""
    kind, values = parts
    for text, sense in values:
        if text in decisions:
            value = decisions[text] == sense
            if kind == "and" and not value:
                return False
            if kind == "or" and value:
                return True
    return None


def condition(test) -> tuple[str, bool]:
    """A condition's identity and sense: `not x`, `x is None` and `x` test the same thing."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        text, sense = condition(test.operand)
        return text, not sense
    if (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value is None
        and isinstance(test.ops[0], ast.Is | ast.IsNot)
    ):
        return ast.dump(test.left), isinstance(test.ops[0], ast.IsNot)
    return ast.dump(test), True


class Module:
    """One parsed file: its functions, what its objects are, and its training steps."""

    def __init__(self, tree: ast.Module, project, path: str = "") -> None:
        self.tree = tree
        self.project = project
        self.path = path
        # Keyed by nodes, so every file of the project shares them.
        self.parents = project.parents
        self.methods = project.methods  # class node -> {name: function}
        self.owner = project.owner  # function -> its class, for methods
        self.nested = project.nested  # function -> {name: nested function}
        self.returns = project.returns  # function -> the set of classes it returns
        self._units = project.units
        self.functions: dict = {}  # module-level functions by name
        self.imports: dict = {}  # name -> (level, module, attribute or None)
        self.import_nodes: list = []  # every import statement, in any scope
        self.classes: dict = {}  # key -> the set of classes assigned to it
        self.function_units: list = []
        self.loops_paths: dict = {}  # every loop of this file -> its paths
        self.calls: list = []  # (call, the function it runs or None)
        self._index()

    # --- what the file defines ---

    def _index(self) -> None:
        self.nodes = [self.tree]  # every node, parents before children
        enclosing = self.project.enclosing
        enclosing[self.tree] = None
        for node in self.nodes:
            function = node if isinstance(node, FUNCTIONS) else enclosing[node]
            for child in ast.iter_child_nodes(node):
                self.parents[child] = node
                enclosing[child] = function
                self.nodes.append(child)
        self.function_nodes = [n for n in self.nodes if isinstance(n, FUNCTIONS)]
        for node in self.tree.body:
            if isinstance(node, FUNCTIONS):
                self.functions[node.name] = node
        for node in self.nodes:
            if isinstance(node, ast.ClassDef):
                methods = {item.name: item for item in node.body if isinstance(item, FUNCTIONS)}
                self.methods[node] = methods
                for method in methods.values():
                    self.owner[method] = node
            elif isinstance(node, ast.Import | ast.ImportFrom):
                self._imported(node)
        for function in self.function_nodes:
            self.nested[function] = {}
            self.returns[function] = set()
        local = {}  # (function, name) -> the class a call assigned to it
        for node in self.nodes:
            function = self.enclosing_function(node)
            if isinstance(node, FUNCTIONS) and function is not None:
                self.nested[function][node.name] = node
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        local[function, target.id] = last_name(node.value)
            elif isinstance(node, ast.Return) and function is not None and node.value is not None:
                value = node.value
                if isinstance(value, ast.Call):
                    self.returns[function].add(last_name(value))
                elif isinstance(value, ast.Name) and (function, value.id) in local:
                    self.returns[function].add(local[function, value.id])
        for function in self.function_nodes:
            self.returns[function] &= TRACKED

    def _imported(self, node) -> None:
        """Record the names an import binds: `from .engine import fit as f` binds f."""
        self.import_nodes.append(node)
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    self.imports[alias.asname] = (0, alias.name, None)
                else:  # `import a.b` binds a; a.b.f is looked up whole
                    head = alias.name.split(".")[0]
                    self.imports[head] = (0, head, None)
            return
        for alias in node.names:
            if alias.name != "*":
                bound = alias.asname or alias.name
                self.imports[bound] = (node.level, node.module or "", alias.name)

    def constructed(self, call) -> set:
        """The classes a call builds: a known class, or what a helper of this file returns."""
        if not isinstance(call, ast.Call):
            return set()
        name = last_name(call)
        if name in TRACKED:
            return {name}
        target = self.resolve(call, Ctx(self.enclosing_function(call)))
        if target is None and name == "get_scheduler" and _keywords(call, "num_training_steps"):
            return {"LambdaLR"}  # transformers' and diffusers' get_scheduler: a LambdaLR in steps
        return set(self.returns.get(target, ())) if target else set()

    def learn_classes(self) -> None:
        """What each name holds, once every file is indexed (a builder may be imported)."""
        self.constructors: dict = {}  # key -> the calls that built it
        for node in self.nodes:
            pairs = []
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                        pairs += zip(target.elts, node.value.elts, strict=False)
                    else:
                        pairs.append((target, node.value))
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                pairs.append((node.target, node.value))
            elif isinstance(node, ast.arg) and node.annotation is not None:
                name = last_name(node.annotation)
                if name in TRACKED:
                    self.classes.setdefault(node.arg, set()).add(name)
            for target, value in pairs:
                key, built = dotted(target), self.constructed(value)
                if key and built:
                    self.classes.setdefault(key, set()).update(built)
                    self.constructors.setdefault(key, []).append(value)

    def kind(self, key: str | None) -> str | None:
        """optimizer, scheduler, scaler or None: from what was assigned, else from the name."""
        if key is None:
            return None
        classes = self.classes.get(key)
        if classes:
            if classes <= SCALERS:
                return "scaler"
            if classes <= SCHEDULERS:
                return "scheduler"
            if classes <= OPTIMIZERS:
                return "optimizer"
        name = key.rsplit(".", 1)[-1].lower()
        if "scaler" in name:
            return "scaler"
        if "sched" in name or name.startswith("lr_"):
            return "scheduler"
        if "opt" in name:
            return "optimizer"
        return None

    def resolve(self, call: ast.Call, ctx: Ctx):
        """The function of a checked file a call runs, if it can be known."""
        func = call.func
        if isinstance(func, ast.Name):
            scope = ctx.function
            while scope is not None:
                if func.id in self.nested.get(scope, {}):
                    return self.nested[scope][func.id]
                scope = self.enclosing_function(scope)
            if func.id in self.functions:
                return self.functions[func.id]
            if func.id in self.imports:
                level, module, name = self.imports[func.id]
                if name is not None:
                    return self.project.function(self, level, module, name)
            if ctx.function is not None:
                return self._made_by_factory(func.id, ctx.function)
            return None
        if not isinstance(func, ast.Attribute):
            return None
        if isinstance(func.value, ast.Name) and func.value.id == "self":
            if ctx.function is not None:
                cls = self.owner.get(self.method_of(ctx.function))
                if cls is not None:
                    return self.methods[cls].get(func.attr)
            return None
        owner = dotted(func.value)  # engine.fit(...), with engine an imported module
        head, _, rest = (owner or "").partition(".")
        if head in self.imports:
            level, module, name = self.imports[head]
            parts = [p for p in (module, name, rest) if p]
            return self.project.function(self, level, ".".join(parts), func.attr)
        return None

    def _made_by_factory(self, name: str, scope, depth: int = 0):
        """The nested function a local name holds when every value it is given (None aside) is
        a call of a factory of the checked files that returns it, maybe through torch.compile()
        or another factory (open_clip's `train_step = _make_train_step(...)`, then
        `train_step(batch)`): the call runs that function."""
        values = self._call_values(scope).get(name)
        if not values:
            return None
        memo = self.__dict__.setdefault("_factory_memo", {})
        if (name, scope) in memo:
            return memo[name, scope]  # None too while it is worked out: `fn = fn(x)`
        memo[name, scope] = None
        found = set()
        for value in values:
            if isinstance(value, ast.Constant) and value.value is None:
                continue
            made = self._returned(value, scope, depth)
            if made is None:
                return None
            found.add(made)
        memo[name, scope] = result = found.pop() if len(found) == 1 else None
        return result

    def _call_values(self, scope) -> dict:
        """name -> the values a function assigns to it, for the names given a call's value."""
        index = self.__dict__.get("_call_values_index")
        if index is None:  # one pass over the file's assignments, for every function at once
            values: dict = {}
            for node in self.nodes:
                if isinstance(node, ast.Assign):
                    function = self.enclosing_function(node)
                    for target in node.targets:
                        if isinstance(target, ast.Name):
                            key = (function, target.id)
                            values.setdefault(key, []).append(node.value)
            index = {}
            for (function, name), given in values.items():
                if any(isinstance(x, ast.Call) for x in given):
                    index.setdefault(function, {})[name] = given
            self._call_values_index = index
        return index.get(scope, {})

    def _returned(self, value, scope, depth: int):
        """The nested function a value is: `factory(...)`, `torch.compile(factory(...))`."""
        if depth > 2 or not isinstance(value, ast.Call):
            return None
        if last_name(value) == "compile" and value.args:
            return self._returned(value.args[0], scope, depth)
        factory = self.resolve(value, Ctx(scope))
        if not isinstance(factory, FUNCTIONS):
            return None
        home = self.project.module_at(factory)
        returns = [n for n in own_nodes(factory) if isinstance(n, ast.Return) and n.value]
        made = set()
        for ret in returns:
            key = dotted(ret.value)
            if isinstance(ret.value, ast.Name) and key in home.nested.get(factory, {}):
                made.add(home.nested[factory][key])
                continue
            if key is None:
                return None
            values = [
                n.value
                for n in own_nodes(factory)
                if isinstance(n, ast.Assign) and any(dotted(t) == key for t in n.targets)
            ]
            for v in values:
                if isinstance(v, ast.Name | ast.Attribute):
                    v = next(
                        (
                            n.value
                            for n in own_nodes(factory)
                            if isinstance(n, ast.Assign)
                            and any(dotted(t) == dotted(v) for t in n.targets)
                        ),
                        None,
                    )
                inner = home._returned(v, factory, depth + 1) if v is not None else None
                if inner is None:
                    return None
                made.add(inner)
        return made.pop() if len(made) == 1 else None

    def enclosing_function(self, node):
        """The function a node is in; None at module level."""
        return self.project.enclosing.get(node)

    def ancestors(self, node, stop=None):
        """The nodes a node sits in, innermost first, up to `stop` (left out) or the file."""
        node = self.parents.get(node)
        while node is not None and node is not stop:
            yield node
            node = self.parents.get(node)

    def method_of(self, function):
        """The method a (possibly nested) function sits in."""
        while function is not None and function not in self.owner:
            function = self.enclosing_function(function)
        return function

    # --- events ---

    def body_paths(self, body: list, ctx: Ctx) -> list:
        paths = [Path()]
        for stmt in body:
            paths = self.stmt(stmt, ctx, paths)
        return paths

    def stmt(self, node, ctx: Ctx, paths: list) -> list:
        live = [p for p in paths if p.done is None]
        if not live:
            return paths
        ended = [p for p in paths if p.done is not None]
        return ended + self._stmt(node, ctx, live)[:MAX_PATHS]

    def _stmt(self, node, ctx: Ctx, paths: list) -> list:
        if isinstance(node, ast.Expr | ast.Assign | ast.AugAssign | ast.AnnAssign):
            if getattr(node, "value", None) is not None:
                paths = self.expr(node.value, ctx, paths)
            if isinstance(node, ast.Assign) and _builds_model(node):
                self.add(paths, Event(BUILD, node.value))  # model = build_model(cfg)
            if _manual_update(node):
                self.add(paths, Event(STEP, node, key="<manual>"))  # p -= lr * p.grad
            if isinstance(node, ast.Assign) and _clears_grad(node) and self._every_grad(node):
                self.add(paths, Event(ZERO, node))  # p.grad = None
            return paths
        if isinstance(node, ast.Return):
            if node.value is not None:
                paths = self.expr(node.value, ctx, paths)
            for path in paths:
                path.done = "return"
            return paths
        if isinstance(node, ast.Raise) or _fails(node):
            return []  # an error path: not a training step
        if isinstance(node, ast.Break | ast.Continue):
            for path in paths:
                path.done = "break" if isinstance(node, ast.Break) else "loop"
            return paths
        if isinstance(node, ast.If):
            return self._if(node, ctx, self.expr(node.test, ctx, paths))
        if isinstance(node, ast.For | ast.AsyncFor | ast.While):
            head = node.test if isinstance(node, ast.While) else node.iter
            paths = self.expr(head, ctx, paths)
            unit = self.unit(node)
            if unit is not None:
                trains = frozenset(
                    ctx.key(e.key) for p in unit.paths for e in p.events if e.kind == TRAIN_MODE
                )
                inner = tuple(e for p in self.body_paths(node.body, ctx) for e in p.events)
                pass_ = Event(
                    PASS,
                    node,
                    unit=unit,
                    keys=self._keys(node, ctx),
                    trains=trains,
                    called=self._called(node, ctx),
                    inner=inner,
                    frozen=self._frozen(node, ctx),
                )
                self.add(paths, pass_)
                return paths
            if node not in self.project.hot:
                for call in _evals_first(node):  # the mode is set before the loop's forward
                    self.add(paths, Event(EVAL_MODE, call, key=ctx.key(dotted(call.func.value))))
                self.add(paths, Event(EVALUATE, node, called=self._called(node, ctx)))
            # Another loop runs once here: what it does, in order, is what matters.
            paths = self.block(node.body, ctx, paths)
            for path in paths:
                if path.done in ("loop", "break"):
                    path.done = None
            return paths
        if isinstance(node, ast.With | ast.AsyncWith):
            for item in node.items:
                paths = self.expr(item.context_expr, ctx, paths)
            return self.block(node.body, ctx, paths)
        if isinstance(node, ast.Try):
            paths = self.block(node.body + node.orelse, ctx, paths)
            return self.block(node.finalbody, ctx, paths)
        return paths

    def block(self, body: list, ctx: Ctx, paths: list) -> list:
        for stmt in body:
            paths = self.stmt(stmt, ctx, paths)
        return paths

    def _if(self, node: ast.If, ctx: Ctx, paths: list) -> list:
        text, sense = self.project.conditions[node]
        # Only a condition tested again somewhere needs remembering; paths that remember the
        # same decisions read the branches once, and each path takes their events.
        remember = text in self.project.repeated_conditions
        branches = {}
        out = []
        parts = _operands(node.test)
        for path in paths:
            if text in path.decisions:  # the same flag tested again takes the same branch
                body = node.body if path.decisions[text] == sense else node.orelse
                out += self.block(body, ctx, [path])
                continue
            known = _implied(node.test, parts, path.decisions)
            if known is not None:  # `a and b` after `a` was false: the body cannot run
                out += self.block(node.body if known else node.orelse, ctx, [path])
                continue
            key = tuple(sorted(path.decisions.items()))
            if key not in branches:
                blank = Path([], dict(path.decisions))
                yes = self.block(node.body, ctx, [blank.copy()])
                no = self.block(node.orelse, ctx, [blank.copy()])
                if remember:
                    for branch, taken in ((yes, sense), (no, not sense)):
                        for p in branch:
                            p.decisions[text] = taken
                # `if a and b:` taken: a and b each hold; `if a or b:` not taken: neither does
                kind, values = parts
                for branch, holds in ((yes, True), (no, False)):
                    if (kind == "and" and holds) or (kind == "or" and not holds):
                        for part, part_sense in values:
                            if part in self.project.repeated_conditions:
                                for p in branch:
                                    p.decisions.setdefault(part, part_sense == holds)
                branches[key] = yes + no
            read = branches[key]
            if all(not p.events and p.done is None for p in read):
                out.append(path)  # no event in either branch: nothing to tell apart
                continue
            out += [Path(path.events + p.events, dict(p.decisions), p.done) for p in read]
        return out

    def add(self, paths: list, event: Event) -> None:
        for path in paths:
            if path.done is None:
                path.events.append(event)

    def expr(self, node, ctx: Ctx, paths: list) -> list:
        """Thread the paths through an expression, in evaluation order."""
        if node is None or isinstance(node, ast.Lambda | ast.FunctionDef):
            return paths
        if isinstance(node, COMPREHENSIONS) and node not in self.project.hot:
            # [model(x) for x in loader] runs a loop as well
            self.add(paths, Event(EVALUATE, node, called=self._called(node, ctx)))
        if not isinstance(node, ast.Call):
            for child in ast.iter_child_nodes(node):
                paths = self.expr(child, ctx, paths)
            return paths
        func = node.func
        if isinstance(func, ast.Attribute):
            paths = self.expr(func.value, ctx, paths)
        closure = None
        for arg in [*node.args, *(k.value for k in node.keywords)]:
            if isinstance(func, ast.Attribute) and func.attr == "step":
                target = arg.body if isinstance(arg, ast.Lambda) else None
                found = self.resolve(ast.Call(func=arg, args=[], keywords=[]), ctx)
                if target is not None or found is not None:
                    closure = target if target is not None else found
                    continue
            paths = self.expr(arg, ctx, paths)
        if closure is not None:  # step(closure): the closure's backward runs before the update
            if isinstance(closure, ast.AST) and not isinstance(closure, ast.FunctionDef):
                paths = self.expr(closure, ctx, paths)
            else:
                paths = self.inline(closure, node, ctx, paths)
        if scaler_call(node):  # loss_scaler(loss, optimizer): its own backward, clip and step
            self._scaler_events(node, ctx, paths)
            return paths
        event = self.classify(node, ctx, closure is not None)
        if event is not None:
            self.add(paths, event)
            return paths
        target = self.resolve(node, ctx)
        if target is not None and target in self.project.relevant:
            return self.inline(target, node, ctx, paths)
        return paths

    def classify(self, call: ast.Call, ctx: Ctx, closure: bool) -> Event | None:
        func = call.func
        name = last_name(call)
        if name in CLIPS:
            return Event(CLIP, call)
        if (
            name in BACKWARD_CALLS
            and not _distributed_autograd(func)
            and not (isinstance(func, ast.Name) and self.resolve(call, ctx) is not None)
        ):
            # A project's own `def backward(loss, scaler):` is read, not taken for one: it may
            # scale the loss on some paths (open_clip)
            return self._backward(call, ctx)
        if name in OPTIMIZERS and (isinstance(func, ast.Name) or "optim" in f"{dotted(func)}"):
            return Event(BUILD, call)
        if name in SEEDS and not self._generator(func) and self.resolve(call, ctx) is None:
            return Event(SEED, call)
        if not isinstance(func, ast.Attribute):
            return None
        raw = dotted(func.value)
        key = ctx.key(raw)
        kind = self.kind(raw) or (ctx.root or self).kind(key)
        if name == "zero_grad" or (name == "zero_" and raw and ".grad" in f"{raw}."):
            return Event(ZERO, call, key=key)
        if name == "unscale_":
            return Event(UNSCALE, call, key=key)
        if name == "update" and kind == "scaler":
            return Event(UPDATE, call, key=key)
        averaged = bool(self.classes.get(raw or "", set()) & EMA_CLASSES) or _ema_like(raw)
        if name == "update_parameters" or (name == "update" and averaged and _of_weights(call)):
            return Event(EMA, call, key=key)
        if name == "step":
            given = bool(call.args or call.keywords)
            if kind == "scaler":
                optimizer = ctx.key(dotted(call.args[0])) if call.args else None
                return Event(STEP, call, key=optimizer, scaled=True)
            if kind == "scheduler":
                return Event(SCHED_STEP, call, key=key, has_args=given)
            if kind == "optimizer":
                # An argument is a closure (LBFGS), even one this file does not show.
                return Event(STEP, call, key=key, closure=closure or given)
            return None
        if name in ("add_", "sub_", "addcdiv_", "addcmul_") and any(map(_uses_grad, call.args)):
            return Event(STEP, call, key="<manual>")  # p.add_(p.grad, alpha=-lr)
        if name == "eval" and not call.args and not call.keywords:
            return Event(EVAL_MODE, call, key=key)
        if name == "train":
            flag = (
                call.args[0] if call.args else (call.keywords[0].value if call.keywords else None)
            )
            if isinstance(flag, ast.Constant) and flag.value is False:
                return Event(EVAL_MODE, call, key=key)
            # model.train(flag): a mode chosen on purpose (DeiT keeps eval for fine-tuning)
            return Event(TRAIN_MODE, call, key=key)
        return None

    def _scaler_events(self, call: ast.Call, ctx: Ctx, paths: list) -> None:
        """The events a loss-scaler object runs, in its order: scaled backward, unscale and
        clip when it is given a clipping value, scaled step, update."""
        loss = ctx.key(dotted(call.args[0]))
        optimizer = call.args[1] if len(call.args) > 1 else None
        for keyword in call.keywords:
            if keyword.arg in ("optimizer", "opt"):
                optimizer = keyword.value
        key = ctx.key(dotted(optimizer))
        self.add(paths, Event(BACKWARD, call, key=loss, scaled=True))
        clip = next((k.value for k in call.keywords if k.arg in ("clip_grad", "max_norm")), None)
        if clip is not None and not (isinstance(clip, ast.Constant) and clip.value is None):
            self.add(paths, Event(UNSCALE, call, key=key))
            self.add(paths, Event(CLIP, call))
        self.add(paths, Event(STEP, call, key=key, scaled=True))
        self.add(paths, Event(UPDATE, call, key=key))

    def _generator(self, func) -> bool:
        """Whether a manual_seed() is a torch.Generator's, which seeds only that generator."""
        if not isinstance(func, ast.Attribute):
            return False
        owner = func.value
        if isinstance(owner, ast.Call):
            return last_name(owner) in GENERATORS
        return bool(self.classes.get(dotted(owner) or "", set()) & GENERATORS)

    def _every_grad(self, node) -> bool:
        """Whether `p.grad = None` clears every gradient of a loop over parameters: not only
        some of them (`if "last_layer" in name:`, DINO's freeze of its last layer) and not one
        tensor alone."""
        for outer in self.ancestors(node):
            if isinstance(outer, ast.If | ast.IfExp) or isinstance(outer, FUNCTIONS):
                return False
            if isinstance(outer, ast.For | ast.AsyncFor):
                return True
        return False

    def _backward(self, call: ast.Call, ctx: Ctx) -> Event:
        """A backward() event; its key is the loss tensor's name, as the caller names it."""
        loss = loss_of(call)
        scaled = isinstance(call.func, ast.Attribute) and _is_scale(uncast(call.func.value))
        return Event(BACKWARD, call, key=ctx.key(dotted(loss)), scaled=scaled)

    def inline(self, function, call: ast.Call, ctx: Ctx, paths: list) -> list:
        """Run a helper's body in place of its call, its parameters named as the caller names."""
        if function in ctx.stack or len(ctx.stack) >= MAX_DEPTH:
            return paths
        params = [a.arg for a in function.args.posonlyargs + function.args.args]
        if params and params[0] in ("self", "cls") and isinstance(call.func, ast.Attribute):
            params = params[1:]
        subst = {p: None for p in params + [a.arg for a in function.args.kwonlyargs]}
        for param, arg in zip(params, call.args, strict=False):
            subst[param] = ctx.key(dotted(arg))
        for keyword in call.keywords:
            if keyword.arg in subst:
                subst[keyword.arg] = ctx.key(dotted(keyword.value))
        # A parameter passed a name keeps the caller's; a nested closure reads the caller's own.
        inner = Ctx(function, tuple(subst.items()), (*ctx.stack, function), ctx.root or self)
        if self.enclosing_function(function) is ctx.function and function not in self.owner:
            inner = Ctx(function, ctx.subst + tuple(subst.items()), inner.stack, inner.root)
        # Read in its own file, which knows its names and helpers.
        owner = self.project.module_at(function)
        result = owner.block(function.body, inner, [p.copy() for p in paths])
        for path in result:
            if path.done == "return":
                path.done = None
        return result

    def _called(self, loop, ctx: Ctx) -> frozenset:
        """The names a loop calls, model(x) or self.net(x), or hands to a helper that may call
        them, compute_loss(model, batch), as the caller names them."""
        raw = self.project.called.get(loop)
        if raw is None:
            raw = self.project.called[loop] = {
                dotted(part)
                for node in own_nodes(loop)
                if isinstance(node, ast.Call)
                for part in (node.func, *node.args)
            } - {None}
        return frozenset(key for key in map(ctx.key, raw) if key)

    def _keys(self, loop, ctx: Ctx) -> frozenset:
        """The names a loop uses, in the loop or in the helpers of this file it calls."""
        keys, seen, todo = set(), set(), [loop]
        while todo:
            for node in ast.walk(todo.pop()):
                if isinstance(node, ast.Call):
                    # What is run: model(x), model.forward(x), or handed to a call; not the
                    # owner of a method (model_ema.update(model) does not run model_ema).
                    func = node.func
                    used = [func, *node.args, *(k.value for k in node.keywords)]
                    if isinstance(func, ast.Attribute) and func.attr in ("forward", "module"):
                        used.append(func.value)
                    for part in used:
                        key = ctx.key(dotted(part))
                        if key:
                            keys.add(key)
                    found = self.project.targets.get(node)
                    if found is not None and found not in seen:
                        seen.add(found)
                        todo.append(found)
        return frozenset(keys)

    def _frozen(self, loop, ctx: Ctx) -> frozenset:
        """The names a loop runs only under `with torch.no_grad():` (or inference_mode) in its
        own body: a distillation teacher or a frozen target encoder, which the step does not
        train. A name handed to a helper outside no_grad is taken as trained."""
        free, hot = set(), set()

        def walk(node, quiet):
            if isinstance(node, ast.With | ast.AsyncWith) and any(
                last_name(item.context_expr) in ("no_grad", "inference_mode") for item in node.items
            ):
                quiet = True
            if isinstance(node, ast.Call):
                func = node.func
                used = [func, *node.args, *(k.value for k in node.keywords)]
                if isinstance(func, ast.Attribute) and func.attr in ("forward", "module"):
                    used.append(func.value)
                keys = {ctx.key(dotted(part)) for part in used} - {None}
                (free if quiet else hot).update(keys)
                found = self.project.targets.get(node)
                if found is not None and not quiet:
                    hot.update(self._keys(found, ctx))
            for child in ast.iter_child_nodes(node):
                walk(child, quiet)

        walk(loop, False)
        return frozenset(free - hot)

    # --- training steps ---

    def unit(self, loop) -> Unit | None:
        """The training step a loop is, or None: memoised, read in the loop's own function."""
        if loop not in self._units:
            self._units[loop] = None  # a loop reached again while being read is no step
            function = self.enclosing_function(loop)
            paths = self.body_paths(loop.body, Ctx(function, (), (function,), self))
            self.loops_paths[loop] = paths
            if _has_step(paths):
                self._units[loop] = Unit(loop, function, paths)
        return self._units[loop]

    def find_steps(self, hot: set, candidates: set) -> None:
        """Read every loop that may run backward(), and the functions that may be one step."""
        for node in self.nodes:
            if isinstance(node, LOOPS):
                if node in hot:
                    self.unit(node)
                else:  # nothing in it can run backward(): no step, no training pass
                    self.loops_paths.setdefault(node, [])
                    self._units.setdefault(node, None)
        for node in self.function_nodes:
            if node in candidates:
                paths = self.body_paths(node.body, Ctx(node, (), (node,), self))
                if _has_step(paths):
                    self.function_units.append(Unit(node, node, paths))

    def mark_batch_loops(self) -> None:
        """A step run from another loop (of any file) is a batch loop."""
        for paths in self.loops_paths.values():
            for path in paths:
                for event in path.events:
                    if event.kind == PASS:
                        event.unit.in_epoch_loop = True

    def loop_units(self) -> list:
        return [
            unit
            for loop, unit in self._units.items()
            if unit is not None and loop in self.loops_paths
        ]

    def steps(self) -> list:
        """Every training step of the file, loops first, in source order."""
        units = self.loop_units() + self.function_units
        return sorted(units, key=lambda u: (u.node.lineno, u.node.col_offset))


def _evals_first(loop) -> list:
    """The `X.eval()` statements at the top level of a loop's body that run before anything
    reads X (DaNN's `for data, target in loader: ...; model.eval(); model(data)`): every
    iteration, so the first one too, sets the mode before the forward."""
    found, seen = [], set()
    for stmt in loop.body:
        call = stmt.value if isinstance(stmt, ast.Expr) else None
        if (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and call.func.attr == "eval"
            and not call.args
            and not call.keywords
            and dotted(call.func.value)
        ):
            root = dotted(call.func.value).split(".")[0]
            if root not in seen:
                found.append(call)
            continue
        seen |= {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)}
    return found


def own_nodes(scope):
    """The nodes of a scope, not those of functions or classes defined inside it."""
    stack = list(ast.iter_child_nodes(scope))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            stack.extend(ast.iter_child_nodes(node))


def loss_of(call: ast.Call):
    """The loss a backward() call runs from: loss in loss.backward(), (loss / k).backward(),
    scaler.scale(loss).backward(), accelerator.backward(loss), torch.autograd.backward(loss)."""
    func = call.func
    if scaler_call(call):
        return call.args[0]
    owner = dotted(func.value) if isinstance(func, ast.Attribute) else None
    wrapper = owner is not None and owner.rsplit(".", 1)[-1] in BACKWARD_WRAPPERS
    if not isinstance(func, ast.Attribute) or wrapper or owner == "torch.autograd":
        value = call.args[0] if call.args else None
    elif func.attr == "manual_backward":
        value = call.args[0] if call.args else None
    else:
        value = func.value
    while True:
        value = uncast(value)
        if _is_scale(value):
            value = value.args[0]
        elif isinstance(value, ast.BinOp):
            value = value.left  # (loss / accumulation_steps).backward()
        else:
            return value


def scaler_call(call) -> bool:
    """`loss_scaler(loss, optimizer, clip_grad=...)`: a loss-scaler object called (timm's
    NativeScaler, used by DeiT, Swin, MAE), which runs scale(loss).backward(), the clipping,
    scaler.step(optimizer) and update() itself. Only an instance named like a scaler, given the
    loss and an optimizer; not a class (StandardScaler(...)) nor a GradScaler's own methods."""
    if not isinstance(call, ast.Call) or len(call.args) < 1:
        return False
    name = dotted(call.func)
    last = (name or "").rsplit(".", 1)[-1]
    if not last or not last[0].islower() or not last.lower().endswith("scaler"):
        return False
    optimizer = (
        call.args[1]
        if len(call.args) > 1
        else next((k.value for k in call.keywords if k.arg in ("optimizer", "opt")), None)
    )
    opt_name = (dotted(optimizer) or "").rsplit(".", 1)[-1].lower()
    return "opt" in opt_name


def backward_sources(nodes) -> set:
    """The names a backward() among `nodes` runs from, and the names those are computed from
    (loss = content + w * style: style too)."""
    grad = {
        dotted(loss_of(n))
        for n in nodes
        if isinstance(n, ast.Call) and last_name(n) in BACKWARD_CALLS
    } - {None}
    changed = bool(grad)
    while changed:
        changed = False
        for n in nodes:
            if isinstance(n, ast.Assign | ast.AugAssign | ast.AnnAssign) and n.value is not None:
                targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                if {dotted(t) for t in targets} & grad:
                    read = {dotted(x) for x in ast.walk(n.value)} - {None} - grad
                    if read:
                        grad |= read
                        changed = True
    return grad


def uncast(node):
    """`x` for `cast(torch.Tensor, x)` or `typing.cast(T, x)`: a no-op for the type checker."""
    while isinstance(node, ast.Call) and last_name(node) == "cast" and len(node.args) == 2:
        node = node.args[1]
    return node


def _is_scale(node) -> bool:
    return isinstance(node, ast.Call) and last_name(node) == "scale" and bool(node.args)


def _has_step(paths: list) -> bool:
    kinds = {event.kind for path in paths for event in path.events}
    return BACKWARD in kinds and STEP in kinds


def _distributed_autograd(func) -> bool:
    """torch.distributed.autograd.backward(context_id, ...): gradients kept per context, never
    in .grad, so there is nothing for zero_grad() to clear."""
    owner = dotted(func.value) if isinstance(func, ast.Attribute) else None
    return owner is not None and owner.endswith(("dist_autograd", "distributed.autograd"))


def _builds_model(node: ast.Assign) -> bool:
    """`model = Net()` or `net = build_model(cfg)`; not `model = model.to(device)`."""
    if not isinstance(node.value, ast.Call) or len(node.targets) != 1:
        return False
    target = dotted(node.targets[0])
    if target is None or not any(w in target.rsplit(".", 1)[-1].lower() for w in ("model", "net")):
        return False
    source = dotted(node.value.func) or ""
    return source.split(".")[0] != target.split(".")[0] and "load" not in source.lower()


def _ema_like(key: str | None) -> bool:
    """`ema`, `model_ema`, `self.ema_model`, `ema2`: a receiver named as an average of the
    weights (`ema` as a word of the name, not `schema`)."""
    if not key:
        return False
    words = key.rsplit(".", 1)[-1].lower().replace("-", "_").split("_")
    return any(w.rstrip("0123456789") == "ema" for w in words)


# Words of an EMA of a value, not of the weights: ema_loss.update(loss.item()).
VALUE_WORDS = ("loss", "acc", "metric", "score", "meter", "time", "speed", "norm", "value")


def _of_weights(call: ast.Call) -> bool:
    """Whether an `ema.update(...)` averages weights: not a running average of a logged value
    (the receiver or an argument named like a loss or a metric, a number, `.item()`)."""
    owner = dotted(call.func.value) if isinstance(call.func, ast.Attribute) else None
    if any(w in (owner or "").rsplit(".", 1)[-1].lower() for w in VALUE_WORDS):
        return False
    for arg in [*call.args, *(k.value for k in call.keywords if k.arg != "step")]:
        for node in ast.walk(arg):
            if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
                return False
            name = (dotted(node) or "").rsplit(".", 1)[-1].lower()
            if name == "item" or any(w in name for w in VALUE_WORDS):
                return False
    return True


def _keywords(call: ast.Call, *names) -> bool:
    return any(k.arg in names for k in call.keywords)


def _uses_grad(node) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == "grad" for n in ast.walk(node))


def _manual_update(node) -> bool:
    # Only `p -= lr * p.grad`: a `+=` of gradients is usually a norm being summed for a log.
    return (
        isinstance(node, ast.AugAssign)
        and isinstance(node.op, ast.Sub)
        and ".grad" not in f"{dotted(node.target)}."
        and _uses_grad(node.value)
    )


def _clears_grad(node: ast.Assign) -> bool:
    return (
        isinstance(node.value, ast.Constant)
        and node.value.value is None
        and any(isinstance(t, ast.Attribute) and t.attr == "grad" for t in node.targets)
    )
