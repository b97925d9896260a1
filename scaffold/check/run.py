"""`scaffold check` as a function: read the paths, run the checks, keep what is selected."""

import ast
import os
from dataclasses import dataclass, field

from scaffold.check.checks import check_project
from scaffold.check.files import Unreadable, python_files, read_source
from scaffold.check.project import Project
from scaffold.check.rules import Finding, selected


@dataclass
class Result:
    """What a check found, the one-line problems with paths it could not check, files read."""

    findings: list = field(default_factory=list)
    problems: list = field(default_factory=list)
    files: int = 0
    # The local modules the checked files import that were not checked: their helpers (an
    # engine.py that runs the training step) were not followed.
    notes: list = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """2 when a path could not be checked, else 1 when something was found, else 0."""
        if self.problems:
            return 2
        return 1 if self.findings else 0


def check_paths(paths: list[str], select=(), ignore=()) -> Result:
    """Check every Python file under `paths`, read together: a helper one file imports from
    another checked file is followed. `select` and `ignore` take codes, prefixes or rule ids
    (SCF201, SCF2, R2, ALL); with no `select`, the rules on by default."""
    result = Result()
    sources, seen = [], set()
    try:
        for path in python_files(paths):
            if isinstance(path, Unreadable):
                result.problems.append(str(path))
                continue
            if path in seen:
                continue
            seen.add(path)
            try:
                sources.append(read_source(path))
            except Unreadable as err:
                result.problems.append(str(err))
    except OSError as err:  # a folder that cannot be listed
        result.problems.append(f"{err.filename}: cannot read: {err.strerror or err}")
    result.files = len(sources)
    result.findings = check_sources(sources, select, ignore, result.problems, result.notes)
    return result


def unchecked_imports(modules: list) -> list[str]:
    """One line per local module the checked files import and that was not checked: a file
    beside the importer (or in a package above it, for a relative import, or below the current
    folder) that exists and was not given. Libraries (torch, timm) are never named."""
    checked = {os.path.abspath(m.path) for m in modules if m.path}
    missing = {}  # file -> the first checked file importing it
    for module in modules:
        if not module.path:
            continue
        here = os.path.dirname(os.path.abspath(module.path))
        for node in module.import_nodes:
            names = []
            if isinstance(node, ast.Import):
                names = [(0, alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                names = [(node.level, base)]
                names += [(node.level, f"{base}.{a.name}" if base else a.name) for a in node.names]
            for level, name in names:
                found = _local_file(here, level, name)
                if found and found not in checked:
                    missing.setdefault(found, module.path)
    cwd = os.getcwd()
    return [
        f"{importer} imports {os.path.relpath(found, cwd)}, which was not checked: its helpers "
        "were not followed (give it too, or its folder)"
        for found, importer in sorted(missing.items())
    ]


def _local_file(here: str, level: int, name: str) -> str | None:
    """The .py file a module name means beside `here`, if there is one."""
    if level:
        base = here
        for _ in range(level - 1):
            base = os.path.dirname(base)
        roots = [base]
    else:
        roots = [here, os.getcwd()]
    parts = [p for p in name.split(".") if p]
    if not parts:
        return None
    for root in roots:
        path = os.path.join(root, *parts)
        for candidate in (path + ".py", os.path.join(path, "__init__.py")):
            if os.path.isfile(candidate):
                return os.path.abspath(candidate)
    return None


def check_sources(sources: list, select=(), ignore=(), problems=None, notes=None) -> list[Finding]:
    """The findings in parsed files that are selected and not silenced by a noqa comment. A
    check that fails on a file (a bug of scaffold check) adds one line to `problems` and the
    other checks still run. `notes`, when given, gets the local modules imported and not
    checked (unchecked_imports)."""
    problems = [] if problems is None else problems
    project = Project()
    by_module = {project.add(source.tree, source.path): source for source in sources}
    if notes is not None:
        notes += unchecked_imports(project.modules)
    try:
        project.finish()
    except Exception as err:  # one line, not a traceback
        problems.append(f"internal error in scaffold check while reading the files: {err!r}")
        return []
    findings = []
    wanted = lambda c: selected(c, select, ignore)  # noqa: E731
    for module, node, code in check_project(project, wanted, problems):
        source = by_module[module]
        if not selected(code, select, ignore):
            continue
        if source.silenced(node.lineno, code):
            continue
        findings.append(Finding(source.path, node.lineno, node.col_offset + 1, code))
    return findings
