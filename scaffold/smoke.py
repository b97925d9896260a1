"""The smoke check: run a new project's overfit-one-batch check in a fresh interpreter.

It runs with scaffold's own Python, so it can run only where the project's runtime
dependencies (its pyproject's [project] dependencies) are importable; they are looked up with
find_spec, without importing them (importing torch takes seconds).
"""

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from scaffold.errors import Interrupted, ScaffoldError

_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_PYTHON_VERSION = re.compile(r"""\s*python_version\s*(<=|>=|==|!=|<|>)\s*['"]([\d.]+)['"]\s*""")


def project_dependencies(project: Path) -> list[str]:
    """The requirement strings of the project's pyproject.toml ([project] dependencies)."""
    text = (project / "pyproject.toml").read_text()
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        try:
            import tomli as tomllib
        except ModuleNotFoundError:
            tomllib = None
    if tomllib is not None:
        return tomllib.loads(text).get("project", {}).get("dependencies", [])
    # No TOML parser: the list is written one quoted requirement per line.
    block = re.search(r"^dependencies\s*=\s*\[(.*?)^\]", text, re.S | re.M)
    return re.findall(r"""["']([^"']+)["']""", block[1]) if block else []


def _applies_here(marker: str) -> bool:
    """Evaluate a `python_version <op> 'X.Y'` marker; any other marker counts as needed."""
    match = _PYTHON_VERSION.fullmatch(marker)
    if not match:
        return True
    wanted = tuple(int(part) for part in match[2].split("."))
    here = sys.version_info[: len(wanted)]
    return {
        "<": here < wanted,
        "<=": here <= wanted,
        ">": here > wanted,
        ">=": here >= wanted,
        "==": here == wanted,
        "!=": here != wanted,
    }[match[1]]


def missing_modules(project: Path) -> list[str]:
    """The project's runtime dependencies that this interpreter cannot import."""
    missing = []
    for requirement in project_dependencies(project):
        spec, _, marker = requirement.partition(";")
        name = _NAME.match(spec)
        if not name or (marker and not _applies_here(marker)):
            continue
        module = name[1].lower().replace("-", "_").replace(".", "_")
        # A distribution may install a module of another name: pillow installs PIL.
        if not _importable(module) and not any(map(_importable, _modules_of(name[1]))):
            missing.append(module)
    return missing


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken install, or one blocked in sys.modules
        return False


def _modules_of(distribution: str) -> list[str]:
    """The top-level modules an installed distribution provides (pillow provides PIL)."""
    import importlib.metadata

    wanted = re.sub(r"[-_.]+", "-", distribution).lower()
    return [
        module
        for module, names in importlib.metadata.packages_distributions().items()
        if any(re.sub(r"[-_.]+", "-", n).lower() == wanted for n in names)
    ]


def torch_available() -> bool:
    """Whether this interpreter can import torch (without importing it: that takes seconds)."""
    return importlib.util.find_spec("torch") is not None


def later_command(project: Path, package: str) -> str:
    """How to run the check by hand once the project is installed."""
    return f"cd {project} && pip install -e . && python -m {package}.overfit"


def run_smoke(project: Path, package: str, device: str = "auto", timeout: float = 600) -> dict:
    """Run `python -m PACKAGE.overfit --json` in `project`; return its result dict.

    Failures and Ctrl-C say that the project is kept and how to run the check again.
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(project / "src"), env.get("PYTHONPATH")]))
    command = [sys.executable, "-m", f"{package}.overfit", "--json", "--device", device]
    kept = f"the project in {project} is complete and kept"
    details = f"cd {project} && PYTHONPATH=src {Path(sys.executable).name} -m {package}.overfit"
    try:
        proc = subprocess.run(
            command,
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        raise ScaffoldError(
            f"smoke check did not finish in {timeout:.0f} s; {kept}; run it with: {details}"
        ) from None
    except KeyboardInterrupt:
        raise Interrupted(
            f"interrupted during the smoke check; {kept}; run the check with: {details}"
        ) from None
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        lines = proc.stderr.strip().splitlines() or ["no output"]
        raise ScaffoldError(
            f"smoke check failed: {lines[-1]}; {kept}; see the details with: {details}"
        ) from None


def describe(result: dict) -> str:
    verdict = "passed" if result["passed"] else "FAILED"
    return (
        f"smoke check {verdict} on {result['device']}: loss {result['first_loss']:.4f} -> "
        f"{result['last_loss']:.4f} in {result['steps']} steps, {result['seconds']:.2f} s"
    )
