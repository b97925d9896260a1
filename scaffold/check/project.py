"""The checked files read together: which file an import names, which calls reach backward()."""

import ast
import os

from scaffold.check.flow import (
    BACKWARD_CALLS,
    CLIPS,
    FUNCTIONS,
    LOOPS,
    OPTIMIZERS,
    SEEDS,
    Ctx,
    Module,
    condition,
    last_name,
    own_nodes,
    scaler_call,
)

# The calls the checks read the order of; a helper without any (directly or through its own
# helpers) adds nothing to a step's events.
RELEVANT_CALLS = (
    BACKWARD_CALLS
    | {"step", "zero_grad", "zero_", "unscale_", "update", "train"}
    | {"eval", "no_grad", "inference_mode", "set_grad_enabled", "autocast", "add_", "sub_"}
    | {"addcdiv_", "addcmul_", "update_parameters"}
    | CLIPS
    | OPTIMIZERS
    | SEEDS
)


class Project:
    """Every file of one `scaffold check` run. A loop split between train.py and a helper in
    engine.py is read as one loop when both files are checked."""

    def __init__(self) -> None:
        self.modules: list = []
        # What the files' Modules share, keyed by nodes (unique across files).
        self.parents: dict = {}
        self.methods: dict = {}
        self.owner: dict = {}
        self.nested: dict = {}
        self.returns: dict = {}
        self.units: dict = {}
        self.hot: set = set()  # the calls, loops and functions that may run backward()
        self.relevant: set = set()  # the functions worth reading where they are called
        self.called: dict = {}  # loop -> the names it calls (memo)
        self.enclosing: dict = {}  # node -> its function (memo)
        self._nodes_of: dict = {}  # scope -> its own nodes (memo)
        self._callers: dict = {}  # function -> its calls
        self.repeated_conditions: set = set()  # conditions that more than one `if` tests
        self.conditions: dict = {}  # `if` node -> its condition's identity and sense
        self.targets: dict = {}  # call -> the function of the checked files it runs, or None
        self._by_tree: dict = {}
        self._by_file: dict = {}  # absolute path of a .py file -> its Module
        self._by_name: dict = {}  # a dotted module name's last parts -> Modules

    def add(self, tree: ast.Module, path: str = "") -> Module:
        """Index one parsed file; call finish() once every file is added."""
        module = Module(tree, self, path)
        self.modules.append(module)
        self._by_tree[tree] = module
        if path:
            absolute = os.path.abspath(path)
            self._by_file[absolute] = module
            parts = absolute[:-3].split(os.sep)[1:]  # without .py and the root
            if parts and parts[-1] == "__init__":
                parts = parts[:-1]
            for i in range(len(parts)):
                self._by_name.setdefault(".".join(parts[i:]), []).append(module)
        return module

    def finish(self) -> None:
        """Learn what names hold, which calls may run backward(), then read the steps."""
        seen = set()
        for module in self.modules:
            module.learn_classes()
            for node in module.nodes:
                if isinstance(node, ast.If):
                    self.conditions[node] = text, _ = condition(node.test)
                    # `if a:` then `if a and b:` test a twice: the operands of a boolean
                    # test count as tested too
                    texts = {text}
                    if isinstance(node.test, ast.BoolOp):
                        texts |= {condition(v)[0] for v in node.test.values}
                    for text in texts:
                        if text in seen:
                            self.repeated_conditions.add(text)
                        seen.add(text)
        for module in self.modules:
            module.calls = [
                (node, module.resolve(node, Ctx(module.enclosing_function(node))))
                for node in module.nodes
                if isinstance(node, ast.Call)
            ]
            self.targets.update(module.calls)
        self.hot = hot = self._reaching_backward()
        self.relevant = self._relevant()
        called = {target for m in self.modules for _, target in m.calls if target is not None}
        # A step that is a function of its own: uncalled, and running backward() itself.
        candidates = self._stepping() - called
        for module in self.modules:
            module.find_steps(hot, candidates)
        for module in self.modules:
            module.mark_batch_loops()

    def _reaching_backward(self) -> set:
        """The loops and functions, in any file, from which a backward() call may run."""
        calls = [call for module in self.modules for call in module.calls]
        self.scaler_calls = {call for call, _ in calls if scaler_call(call)}
        hot: set = set()
        changed = True
        while changed:  # until no helper adds another caller
            changed = False
            for call, target in calls:
                if call in hot:
                    continue
                if last_name(call) in BACKWARD_CALLS or target in hot or call in self.scaler_calls:
                    hot.add(call)
                    changed = True
                    node = self.parents.get(call)
                    while node is not None:
                        hot.add(node)
                        node = self.parents.get(node)
        return hot

    def _stepping(self) -> set:
        """The functions that may run backward() outside their own loops, directly or through
        such a helper: the only ones that can be one training step themselves (train_step).
        A function that runs its backward() in a loop, or calls one that does, (fit, a test
        calling fit) is not read as a step: its loops are."""
        stepping: set = set()
        changed = True
        while changed:
            changed = False
            for module in self.modules:
                for call, target in module.calls:
                    function = module.enclosing_function(call)
                    if function is None or function in stepping or _in_loop(module, call):
                        continue
                    if (
                        last_name(call) in BACKWARD_CALLS
                        or target in stepping
                        or call in self.scaler_calls
                    ):
                        stepping.add(function)
                        changed = True
        return stepping

    def _relevant(self) -> set:
        """The functions that make, or call a function that makes, a call the checks read:
        the rest (data loading, logging, file handling) are not read where they are called,
        which keeps a large project's reading fast."""
        relevant = set()
        for module in self.modules:
            for node in module.nodes:
                if (
                    isinstance(node, ast.Call)
                    and (last_name(node) in RELEVANT_CALLS or node in self.scaler_calls)
                ) or (
                    isinstance(node, ast.Attribute) and node.attr == "grad"  # p -= lr * p.grad
                ):
                    function = module.enclosing_function(node)
                    while function is not None and function not in relevant:
                        relevant.add(function)  # and the functions it is nested in
                        function = module.enclosing_function(function)
        changed = True
        while changed:
            changed = False
            for module in self.modules:
                for call, target in module.calls:
                    if target in relevant:
                        caller = module.enclosing_function(call)
                        if caller is not None and caller not in relevant:
                            relevant.add(caller)
                            changed = True
        return relevant

    def module_at(self, node) -> Module:
        """The file a node was read from."""
        while node in self.parents:
            node = self.parents[node]
        return self._by_tree[node]

    def callers(self, function) -> list:
        """(call, the module it is in) for every call of `function` in the checked files."""
        if not self._callers and self.modules:
            for module in self.modules:
                for call, target in module.calls:
                    if target is not None:
                        self._callers.setdefault(target, []).append((call, module))
        return self._callers.get(function, [])

    def nodes_of(self, scope) -> tuple:
        """The nodes of a scope, not those of the functions and classes inside it (memoised)."""
        found = self._nodes_of.get(scope)
        if found is None:
            found = self._nodes_of[scope] = tuple(own_nodes(scope))
        return found

    def function(self, importer: Module, level: int, module: str, name: str):
        """The function `name` of the checked module an import names, or None.

        `from .engine import fit` (level 1) is looked up beside the importer; `from pkg.engine
        import fit` in the checked file whose path ends with pkg/engine.py, the nearest one to
        the importer when several do. `from pkg import engine` names a module, not a function:
        its functions are found through the attribute call `engine.fit(...)`.
        """
        target = self._module(importer, level, module)
        if target is not None and name in target.functions:
            return target.functions[name]
        return None

    def _module(self, importer: Module, level: int, module: str) -> Module | None:
        if level:
            if not importer.path:
                return None
            base = os.path.dirname(os.path.abspath(importer.path))
            for _ in range(level - 1):
                base = os.path.dirname(base)
            path = os.path.join(base, *module.split(".")) if module else base
            return self._by_file.get(path + ".py") or self._by_file.get(
                os.path.join(path, "__init__.py")
            )
        found = self._by_name.get(module, [])
        if len(found) <= 1:
            return found[0] if found else None
        here = os.path.abspath(importer.path or ".")
        return max(found, key=lambda m: len(os.path.commonpath([here, os.path.abspath(m.path)])))


def _in_loop(module: Module, node) -> bool:
    """Whether a node runs in a loop of its own function."""
    for outer in module.ancestors(node):
        if isinstance(outer, FUNCTIONS):
            return False
        if isinstance(outer, LOOPS):
            return True
    return False
