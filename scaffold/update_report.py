"""The worker of `scaffold update`: update a project, or look for a newer template; report."""

from pathlib import Path

import typer

from scaffold import update as updater  # imports copier
from scaffold.options import describe_answers


def update_and_report(
    project: Path, set_items: list[str], *, to: str | None, template: str | None, check: bool
) -> int:
    """Update `project` with the --set KEY=VALUE items, or with `check` only report whether a
    newer template exists; say what came of it, and return the exit code (1: conflicts)."""
    if check:
        current, available, newer = updater.check_for_update(project, template, to)
        if newer is None:  # a hash on a remote that is no branch or tag tip
            typer.echo(f"on template {current}; whether {available} is newer shows on update")
            return 0
        typer.echo(
            f"a newer template is available: {current} -> {available}"
            if newer
            else f"up to date with template {current}"
        )
        return 0
    sets = updater.parse_sets(set_items)
    result = updater.update_project(project, sets, to=to, template=template)
    for note in result.notes:
        typer.echo(f"note: {note}", err=True)
    if result.repointed:
        typer.echo(f"recorded the template source {result.repointed} (committed)")
    before, after = updater.short(result.before), updater.short(result.after)
    what = f"template {before} -> {after}" if before != after else f"template {after}"
    now = describe_answers(updater.read_project_answers(project))
    typer.echo(f"Updated {project.name}: {what}; now {now}")
    if result.conflicts:
        typer.echo(
            f"{len(result.conflicts)} file(s) with conflicts, marked inline between "
            "'<<<<<<< before updating' and '>>>>>>> after updating':",
            err=True,
        )
        for name in result.conflicts:
            typer.echo(f"  {name}", err=True)
        typer.echo(
            "Resolve them, run python -m pytest -q, then git add -A && git commit.", err=True
        )
        return 1
    if result.changed:
        typer.echo(f"{len(result.changed)} file(s) changed; review with git diff, run")
        typer.echo("python -m pytest -q, then git add -A && git commit.")
    else:
        typer.echo("Nothing changed.")
    return 0
