"""`scaffold check --fix` and `--diff`: make or show the sure fixes, then report what is left."""

import typer

from scaffold.check.fix import plan_fixes, write_fix
from scaffold.check.report import format_findings


def fix_and_report(result, diff_only: bool, format_: str, recheck) -> int:
    """Fix the findings of `result` in place (or print the diff with `diff_only`), report the
    ones left in `format_`, and return the exit code; `recheck()` checks the files again."""
    plans = plan_fixes(result.findings)
    for plan in plans:
        for finding, why in plan.left:
            where = f"{finding.path}:{finding.line}:{finding.column}"
            typer.echo(f"{where}: {finding.code} not fixed: {why}", err=True)
    fixed = sum(len(p.fixed) for p in plans if p.changed)
    if diff_only:
        typer.echo("".join(p.diff() for p in plans if p.changed), nl=False)
        left = len(result.findings) - fixed
        typer.echo(f"would fix {fixed}, {left} left", err=True)
        return 2 if result.problems else (1 if fixed else 0)
    problems = list(result.problems)
    for plan in plans:
        if not plan.changed:
            continue
        try:
            write_fix(plan)
        except OSError as err:
            fixed -= len(plan.fixed)
            message = str(err) if not err.filename else f"{plan.path}: cannot write: {err.strerror}"
            problems.append(message)
            typer.echo(f"error: {message}", err=True)
    after = recheck() if fixed else result
    if after.findings or format_ != "text":
        typer.echo(format_findings(after.findings, format_))
    summary = f"fixed {fixed}, {len(after.findings)} left in {counted(after.files, 'file')}"
    typer.echo(summary, err=format_ != "text")
    if problems:
        return 2
    return 1 if after.findings else 0


def counted(number: int | list, noun: str) -> str:
    """'1 file', '3 files': a number, or a list's length, with its noun."""
    number = number if isinstance(number, int) else len(number)
    return f"{number} {noun}{'s' if number != 1 else ''}"
