"""The `scaffold` command line: parses, asks and reports; render.py and smoke.py do the work."""

import sys
import time
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from typer.core import TyperGroup

from scaffold import __version__
from scaffold.errors import ScaffoldError, UsageError
from scaffold.options import HELP, Options, project_names


class OneLineErrors(TyperGroup):
    """Report every error as one line on stderr with exit code 2 (usage) or 1, no traceback."""

    def main(self, *args, standalone_mode: bool = True, **kwargs):
        try:
            result = super().main(*args, standalone_mode=False, **kwargs)
        except ScaffoldError as err:
            typer.echo(f"error: {err}", err=True)
            sys.exit(err.exit_code)
        except typer.TyperException as err:  # bad flags or values: Typer's usage errors
            typer.echo(f"error: {err.format_message()}", err=True)
            sys.exit(2)
        except (typer.Abort, KeyboardInterrupt):
            typer.echo("aborted; nothing was written", err=True)
            sys.exit(130)
        sys.exit(result if isinstance(result, int) else 0)


app = typer.Typer(
    cls=OneLineErrors,
    help="Generate PyTorch training projects whose loops are correctly ordered, and prove it.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,  # plain help: readable in any terminal width, and starts faster
)


class Task(str, Enum):
    classification = "classification"
    regression = "regression"


class Scheduler(str, Enum):
    cosine = "cosine"
    plateau = "plateau"


def _version(value: bool) -> None:
    if value:
        typer.echo(f"scaffold {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Show the version."),
    ] = False,
) -> None:
    """Generate plain-PyTorch training projects whose loops are correctly ordered, and prove it."""


def stdin_is_interactive() -> bool:
    """Prompts only when a person can answer them; a pipe or CI never waits."""
    return sys.stdin is not None and sys.stdin.isatty()


def _ask(name: str, default, choices: tuple[str, ...] | None = None):
    typer.secho(f"  {HELP[name]}", dim=True, err=True)
    label = name.replace("_", " ")
    if isinstance(default, bool):
        return typer.confirm(label, default=default, err=True)
    if choices:
        label = f"{label} ({'/'.join(choices)})"
    while True:
        answer = typer.prompt(label, default=default, type=type(default), err=True)
        if not choices or answer in choices:
            return answer
        typer.echo(f"  choose one of: {', '.join(choices)}", err=True)


def resolve_options(given: dict, interactive: bool) -> Options:
    """Fill the options not given on the command line: ask for each, or take its default."""
    defaults = Options()
    values = {}

    def offered(name: str):
        default = getattr(defaults, name)
        if name == "patience" and values.get("scheduler") == "plateau":
            # Early stopping must wait longer than the plateau scheduler: offer a valid default.
            default = max(default, values.get("plateau_patience", defaults.plateau_patience) + 1)
        return default

    def pick(name: str, choices: tuple[str, ...] | None = None):
        if given.get(name) is not None:
            values[name] = given[name]
        elif interactive:
            while True:  # ask again until the answers so far make a valid project
                values[name] = _ask(name, offered(name), choices)
                try:
                    Options(**{"patience": offered("patience"), **values}).validate()
                    break
                except UsageError as err:
                    typer.echo(f"  {err}", err=True)
        else:
            values[name] = offered(name)
        return values[name]

    pick("task", tuple(t.value for t in Task))
    if pick("scheduler", tuple(s.value for s in Scheduler)) == "plateau":
        pick("plateau_patience")
    pick("amp")
    if pick("clip"):
        pick("max_grad_norm")
    if pick("early_stopping"):
        pick("patience")
    pick("seed")
    # Follow-up values given as flags count even when their question was not asked.
    values.update({k: v for k, v in given.items() if v is not None and k not in values})
    options = Options(**values)
    options.validate()
    return options


@app.command()
def new(
    dest: Annotated[
        str,
        typer.Argument(metavar="DEST", help="Folder to create; its name is the project's name."),
    ],
    task: Annotated[Task | None, typer.Option(help=HELP["task"])] = None,
    scheduler: Annotated[Scheduler | None, typer.Option(help=HELP["scheduler"])] = None,
    plateau_patience: Annotated[int | None, typer.Option(help=HELP["plateau_patience"])] = None,
    amp: Annotated[bool | None, typer.Option("--amp/--no-amp", help=HELP["amp"])] = None,
    clip: Annotated[bool | None, typer.Option("--clip/--no-clip", help=HELP["clip"])] = None,
    max_grad_norm: Annotated[float | None, typer.Option(help=HELP["max_grad_norm"])] = None,
    early_stopping: Annotated[
        bool | None,
        typer.Option("--early-stopping/--no-early-stopping", help=HELP["early_stopping"]),
    ] = None,
    patience: Annotated[int | None, typer.Option(help=HELP["patience"])] = None,
    seed: Annotated[int | None, typer.Option(help=HELP["seed"])] = None,
    defaults: Annotated[
        bool,
        typer.Option("--defaults", "-y", help="Never prompt; unset options take defaults."),
    ] = False,
    smoke: Annotated[
        bool | None,
        typer.Option(
            "--smoke/--no-smoke",
            help="Run the project's overfit-one-batch check after rendering "
            "(default: on when torch is importable).",
        ),
    ] = None,
    template: Annotated[
        str | None,
        typer.Option(
            metavar="SRC",
            help="Render another copier template (a path or git URL, e.g. your team's fork); "
            "options not given take that template's defaults, and nothing is asked.",
        ),
    ] = None,
    vcs_ref: Annotated[
        str | None,
        typer.Option(metavar="REF", help="With --template: the git tag, branch or commit to use."),
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Render into a non-empty DEST; changed files are kept as *.orig.",
        ),
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing on success.")] = False,
) -> int:
    """Create a new PyTorch training project in DEST.

    Options not given are asked for when stdin is a terminal; with -y, or without a
    terminal, they take their defaults.
    """
    project_name, package_name = project_names(dest)
    given = {
        "task": task.value if task else None,
        "scheduler": scheduler.value if scheduler else None,
        "plateau_patience": plateau_patience,
        "amp": amp,
        "clip": clip,
        "max_grad_norm": max_grad_norm,
        "early_stopping": early_stopping,
        "patience": patience,
        "seed": seed,
    }
    from scaffold import smoke as smoke_check  # no torch import: find_spec only
    from scaffold.render import render_project  # imports copier
    from scaffold.source import builtin_source, has_uncommitted_template, user_source

    if template is None:
        if vcs_ref is not None:
            raise UsageError("--vcs-ref goes with --template")
        options = resolve_options(given, interactive=stdin_is_interactive() and not defaults)
        source = builtin_source()
    else:
        options = {key: value for key, value in given.items() if value is not None}
        source = user_source(template, vcs_ref)

    started = time.perf_counter()
    result = render_project(dest, project_name, package_name, options, force=force, source=source)
    seconds = time.perf_counter() - started
    if not quiet:
        typer.echo(f"Created {project_name}: {describe_answers(result.answers)}")
        if has_uncommitted_template(source):
            typer.echo(
                "  warning: rendered from uncommitted template edits; the project records a "
                "commit that exists nowhere, so scaffold update will not work for it",
                err=True,
            )
        typer.echo(f"  {len(result.files)} files in {result.dest} ({seconds:.1f} s)")
        for backup in result.backups:
            typer.echo(f"  kept your earlier {backup.with_suffix('')} as {backup}")

    run_smoke = smoke_check.torch_available() if smoke is None else smoke
    exit_code = 0
    if run_smoke:
        if not smoke_check.torch_available():
            raise ScaffoldError(
                "--smoke needs torch in this Python; the project is rendered, "
                f"run 'python -m {package_name}.overfit' in it once torch is installed"
            )
        report = smoke_check.run_smoke(result.dest, package_name)
        exit_code = 0 if report["passed"] else 1
        if not quiet or not report["passed"]:
            typer.echo(smoke_check.describe(report), err=not report["passed"])
    elif not quiet and smoke is None:
        typer.echo(
            f"Smoke check skipped: torch is not importable here. After installing the project, "
            f"run: python -m {package_name}.overfit"
        )
    if not quiet:
        _print_next_steps(result.dest, package_name)
    return exit_code


def describe_answers(answers: dict) -> str:
    """What a project was rendered with, as its answers file records it."""
    known = {k: v for k, v in answers.items() if k in Options.__dataclass_fields__}
    return Options(**known).describe()


@app.command()
def update(
    path: Annotated[
        Path, typer.Argument(metavar="PATH", help="The generated project (default: here).")
    ] = Path("."),
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            metavar="KEY=VALUE",
            help="Change an answer, e.g. --set amp=true or --set scheduler=plateau (repeatable).",
        ),
    ] = None,
    to: Annotated[
        str | None, typer.Option(metavar="REF", help="Template tag, branch or commit to update to.")
    ] = None,
    template: Annotated[
        str | None,
        typer.Option(
            metavar="SRC", help="Take the new version from this template source (path or git URL)."
        ),
    ] = None,
    check: Annotated[
        bool, typer.Option("--check", help="Only report whether a newer template exists.")
    ] = False,
) -> int:
    """Update a generated project to the current template, keeping your edits.

    The project must be committed in git. Conflicting edits are left inline between
    <<<<<<< and >>>>>>> markers and listed; the exit code is then 1.
    """
    from scaffold import update as updater  # imports copier

    project = path.absolute()
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
    sets = updater.parse_sets(set_ or [])
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


def _print_next_steps(dest: Path, package: str) -> None:
    try:
        where = dest.relative_to(Path.cwd())
    except ValueError:
        where = dest
    typer.echo(
        "Next:\n"
        f"  cd {where}\n"
        '  python -m venv .venv && . .venv/bin/activate && pip install -e ".[dev]"\n'
        f"  python -m {package}.train --epochs 20 --out runs/first\n"
        "  python -m pytest -q\n"
        "Its tests guard the training loop: a change that breaks one of the rules in its README\n"
        "(zero_grad before backward, clipping before the step, ...) fails them, naming the rule."
    )


def main() -> None:
    app()
