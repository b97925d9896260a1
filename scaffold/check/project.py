"""The checked files read together: which file an import names, which calls reach backward()."""

import ast
import os

from scaffold.check.flow import Ctx, Module, last_name


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
        for module in self.modules:
            module.learn_classes()
        for module in self.modules:
            module.calls = [
                (node, module.resolve(node, Ctx(module.enclosing_function(node))))
                for node in module.nodes
                if isinstance(node, ast.Call)
            ]
        hot = self._reaching_backward()
        called = {target for m in self.modules for _, target in m.calls if target is not None}
        for module in self.modules:
            module.find_steps(hot, called)
        for module in self.modules:
            module.mark_batch_loops()

    def _reaching_backward(self) -> set:
        """The loops and functions, in any file, from which a backward() call may run."""
        calls = [call for module in self.modules for call in module.calls]
        hot: set = set()
        changed = True
        while changed:  # until no helper adds another caller
            changed = False
            for call, target in calls:
                if call in hot:
                    continue
                if last_name(call) in ("backward", "manual_backward") or target in hot:
                    hot.add(call)
                    changed = True
                    node = self.parents.get(call)
                    while node is not None:
                        hot.add(node)
                        node = self.parents.get(node)
        return hot

    def module_at(self, node) -> Module:
        """The file a node was read from."""
        while node in self.parents:
            node = self.parents[node]
        return self._by_tree[node]

    def callers(self, function) -> list:
        """(call, the module it is in) for every call of `function` in the checked files."""
        return [(call, m) for m in self.modules for call, target in m.calls if target is function]

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
