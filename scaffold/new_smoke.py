"""After `scaffold new`: run the smoke check where it can run, and say what it found."""

import sys

import typer

from scaffold import smoke as smoke_check
from scaffold.errors import ScaffoldError


def smoke_check_project(created, smoke: bool | None, quiet: bool) -> int:
    """Run the smoke check (--smoke; by default where it can run); the project is kept
    whatever it finds. The exit code: 1 when it failed, else 0."""
    project, package = created.result.dest, created.package
    if smoke is False:
        return 0
    missing = smoke_check.missing_modules(project)
    if missing:
        why = f"{', '.join(missing)} not importable by {sys.executable}"
        later = smoke_check.later_command(project, package)
        if smoke:
            raise ScaffoldError(
                f"--smoke cannot run: {why}; the project in {project} is complete and kept; "
                f"check it later with: {later}"
            )
        if not quiet:
            typer.echo(f"Smoke check skipped: {why}. Check it later with: {later}")
        return 0
    report = smoke_check.run_smoke(project, package)
    if not quiet or not report["passed"]:
        typer.echo(smoke_check.describe(report), err=not report["passed"])
    if not report["passed"]:
        typer.echo(f"  the project in {project} is kept, to look into", err=True)
    return 0 if report["passed"] else 1
