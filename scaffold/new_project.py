"""The worker of `scaffold new`: options, render, repository, smoke check, each step reported."""

import importlib.util
import sys
import time
from pathlib import Path

import typer

from scaffold import interrupts, new_repository, new_smoke
from scaffold.errors import Interrupted, UsageError
from scaffold.options import describe_answers
from scaffold.prompts import resolve_options


def new_project(
    dest: str,
    given: dict,
    *,
    interactive: bool,
    template: str | None,
    vcs_ref: str | None,
    force: bool,
    git: bool,
    smoke: bool | None,
    quiet: bool,
) -> int:
    """Create the project in DEST with the options given (None: not given) and say how it
    went; return the exit code. A Ctrl-C ends in one line that says what was kept."""
    interrupts.placed.clear()  # an earlier call in this process (a test run) placed its own
    try:
        from scaffold.render import create_project  # imports copier

        if template is None and vcs_ref is not None:
            raise UsageError("--vcs-ref goes with --template")
        if template is None:
            answers = resolve_options(given, interactive)
        else:  # that template's own defaults fill the gaps
            answers = {key: value for key, value in given.items() if value is not None}
        started = time.perf_counter()
        placed = interrupts.placed
        created = create_project(
            dest, answers, template=template, vcs_ref=vcs_ref, force=force, placed=placed
        )
        if not quiet:
            _report_created(created, time.perf_counter() - started)
        if created.uncommitted:  # a warning, which --quiet does not hide
            typer.echo(
                "warning: rendered from uncommitted template edits; the project records a "
                "commit that exists nowhere, so scaffold update will not work for it; commit "
                "the template and render again",
                err=True,
            )
        new_repository.make_repository(created, git, quiet)
        exit_code = new_smoke.smoke_check_project(created, smoke, quiet)
        if not quiet:
            _print_next_steps(created.result.dest, created.package)
        return exit_code
    except KeyboardInterrupt:
        raise Interrupted(interrupts.interrupted_message()) from None


def _report_created(created, seconds: float) -> None:
    result = created.result
    typer.echo(f"Created {result.dest.name}: {describe_answers(result.answers)}")
    typer.echo(f"  {len(result.files)} files in {result.dest} ({seconds:.1f} s)")
    for backup in result.backups:
        typer.echo(f"  kept your earlier {backup.with_suffix('')} as {backup}")
    for stale in result.removed:
        typer.echo(f"  removed {stale.name}, left by a scaffold new that was killed", err=True)


def _install_lines() -> str:
    """How to install the project: into this environment when it is a venv that has torch
    (the README's demo: installing torch again in a new venv would be minutes for nothing),
    else into a venv of its own, torch first so that pip keeps the build chosen."""
    in_venv = sys.prefix != sys.base_prefix
    if in_venv and importlib.util.find_spec("torch") is not None:
        return '  pip install -e ".[dev]"   # into this environment, which has torch\n'
    return (
        "  python -m venv .venv && . .venv/bin/activate\n"
        "  pip install torch --index-url https://download.pytorch.org/whl/cpu"
        "   # or the CUDA build: see README.md\n"
        '  pip install -e ".[dev]"\n'
    )


def _print_next_steps(dest: Path, package: str) -> None:
    try:
        where = dest.relative_to(Path.cwd())
    except ValueError:
        where = dest
    typer.echo(
        "Next:\n"
        f"  cd {where}\n"
        + _install_lines()
        + f"  python -m {package}.train --epochs 20 --out runs/first\n"
        "  python -m pytest -q\n"
        "Its tests guard the training loop: a change that breaks one of the rules in its README\n"
        "(zero_grad before backward, clipping before the step, ...) fails them, naming the rule."
    )
