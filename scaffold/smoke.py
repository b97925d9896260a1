"""The smoke check: run a new project's overfit-one-batch check in a fresh interpreter."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

from scaffold.errors import ScaffoldError


def torch_available() -> bool:
    """Whether this interpreter can import torch (without importing it: that takes seconds)."""
    return importlib.util.find_spec("torch") is not None


def run_smoke(project: Path, package: str, device: str = "auto", timeout: float = 600) -> dict:
    """Run `python -m PACKAGE.overfit --json` in `project`; return its result dict."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(project / "src"), env.get("PYTHONPATH")]))
    command = [sys.executable, "-m", f"{package}.overfit", "--json", "--device", device]
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
        raise ScaffoldError(f"smoke check did not finish in {timeout:.0f} s") from None
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        lines = proc.stderr.strip().splitlines() or ["no output"]
        raise ScaffoldError(f"smoke check could not run: {lines[-1]}") from None


def describe(result: dict) -> str:
    verdict = "passed" if result["passed"] else "FAILED"
    return (
        f"smoke check {verdict} on {result['device']}: loss {result['first_loss']:.4f} -> "
        f"{result['last_loss']:.4f} in {result['steps']} steps, {result['seconds']:.2f} s"
    )
