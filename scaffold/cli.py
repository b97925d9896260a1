"""The `scaffold` command line: each command parses, calls one worker function, and reports."""

from scaffold import interrupts

interrupts.exit_while_importing()  # a Ctrl-C during the slower imports below: one line, exit 130

# ruff: noqa: E402 - after the line above
from enum import Enum
from functools import partial
from pathlib import Path
from typing import Annotated

import typer

from scaffold import __version__
from scaffold.errors import UsageError
from scaffold.one_line import OneLineErrors
from scaffold.option_flags import given_options, set_help, with_option_flags
from scaffold.prompts import stdin_is_interactive

app = typer.Typer(
    cls=OneLineErrors,
    help="Generate PyTorch training projects whose loops are correctly ordered, and prove it.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,  # plain help: readable in any terminal width, and starts faster
)


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


@app.command()
@with_option_flags
def new(
    dest: Annotated[
        str,
        typer.Argument(metavar="DEST", help="Folder to create; its name is the project's name."),
    ],
    *,
    git: Annotated[
        bool,
        typer.Option(
            "--git/--no-git",
            help="Make DEST a git repository with a first commit of the project, so scaffold "
            "update works at once. [default: on; skipped with a note when git is not on PATH "
            "or DEST is inside a git work tree; a git failure is a warning, and the project is "
            "kept]",
            show_default=False,  # said above
        ),
    ] = True,
    defaults: Annotated[
        bool,
        typer.Option("--defaults", "-y", help="Never prompt; unset options take defaults."),
    ] = False,
    smoke: Annotated[
        bool | None,
        typer.Option(
            "--smoke/--no-smoke",
            help="Run the project's overfit-one-batch check after rendering. [default: on when "
            "the project's dependencies (torch, numpy) are importable here, else skipped with "
            "a note; --smoke that cannot run exits 1 and keeps the project]",
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
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="Print nothing on success but warnings.")
    ] = False,
    **options,  # the options of copier.yml, from their flags (with_option_flags)
) -> int:
    """Create a new PyTorch training project in DEST.

    Options not given are asked for when stdin is a terminal; with -y, or without a
    terminal, they take their defaults.
    """
    from scaffold.new_project import new_project

    interactive = stdin_is_interactive() and not defaults and template is None
    return new_project(
        dest, given_options(options), interactive=interactive, template=template,
        vcs_ref=vcs_ref, force=force, git=git, smoke=smoke, quiet=quiet,
    )  # fmt: skip


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
            help=set_help(),
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
    from scaffold.update_report import update_and_report  # imports copier

    return update_and_report(path.absolute(), set_ or [], to=to, template=template, check=check)


class Format(str, Enum):
    text = "text"
    json = "json"
    github = "github"
    sarif = "sarif"


class _PlainUsage(typer.core.TyperCommand):
    """Usage as `PATH...`: typer writes a required argument as `{PATH}...`."""

    def collect_usage_pieces(self, ctx):
        return [
            piece.replace("{", "").replace("}", "") for piece in super().collect_usage_pieces(ctx)
        ]


def _codes(given: list[str] | None) -> list[str]:
    # --select SCF201,R4 as ruff takes it, or the option repeated.
    return [s.strip() for item in given or [] for s in item.split(",") if s.strip()]


@app.command(cls=_PlainUsage)
def check(
    paths: Annotated[
        list[str],
        typer.Argument(metavar="PATH", help="Python files, or folders to search for them."),
    ],
    format_: Annotated[
        Format,
        typer.Option(
            "--format",
            help="text: path:line:col: CODE message (rule); json: a list of objects; github: "
            "GitHub Actions annotations; sarif: SARIF 2.1.0 for code scanning.",
        ),
    ] = Format.text,
    select: Annotated[
        list[str] | None,
        typer.Option(
            metavar="CODE",
            help="Only these codes or rules, e.g. SCF201, R2, or ALL for the opt-in ones too "
            "(repeatable); replaces the pyproject.toml setting.",
        ),
    ] = None,
    ignore: Annotated[
        list[str] | None,
        typer.Option(
            metavar="CODE",
            help="Skip these codes or rules (repeatable); replaces the pyproject.toml setting.",
        ),
    ] = None,
    fix: Annotated[
        bool,
        typer.Option(
            "--fix",
            help="Fix in place what is unambiguous: weights_only=True on a torch.load whose "
            "result is used as a state dict, a zero_grad() line moved before backward(); report "
            "what is left, and why.",
        ),
    ] = False,
    diff: Annotated[
        bool,
        typer.Option("--diff", help="Print the fixes as a diff and change nothing."),
    ] = False,
) -> int:
    """Find silent training-loop bugs in PyTorch code, without running it.

    Reports the loop-rule breaks that can be read from the source, through helpers in the files
    given (read together): zero_grad, backward, clipping and step out of order, AMP misuse,
    schedulers stepped at the wrong rate or fed the wrong value, eval mode left on or never set,
    validation without no_grad, loss tensors kept, gradient accumulation (loss not divided,
    zero_grad or step every micro-batch), an EMA updated before the step, a compiled module's
    state dict saved, DistributedSampler without set_epoch, torch.load without weights_only.
    Local modules the files import but that were not given are named. Off unless selected
    (--select ALL): per-batch epoch means (R12), no seed (S1), unseeded loader workers (S2). `#
    noqa: SCF201` at the end of a line silences that code there, a bare `# noqa` every code.
    Settings (select, ignore, extend-ignore, exclude) come from [tool.scaffold.check] in the
    nearest pyproject.toml at or above the current folder. Exit code: 0 clean, 1 findings (with
    --fix: findings left; with --diff: fixes to make), 2 when a path or the settings could not
    be read (the other paths are still checked).
    """
    from scaffold.check.config import load_settings
    from scaffold.check.files import listed_files
    from scaffold.check.fix_workflow import counted, fix_and_report
    from scaffold.check.report import format_findings
    from scaffold.check.rules import unknown_selectors
    from scaffold.check.run import check_paths

    select, ignore = _codes(select), _codes(ignore)
    unknown = unknown_selectors(select + ignore)
    if unknown:
        raise UsageError(f"no check is named {unknown[0]!r}; codes look like SCF201, rules R2")
    settings = load_settings().with_flags(select, ignore)
    targets = listed_files(paths, settings.excluded) if settings.exclude else paths
    recheck = partial(check_paths, targets, settings.select, settings.ignored)
    result = recheck()
    for problem in result.problems:
        typer.echo(f"error: {problem}", err=True)
    for note in result.notes:
        typer.echo(f"note: {note}", err=True)
    if not result.files and not result.problems:  # a mistyped folder would pass silently
        typer.echo(f"warning: no Python file found in {', '.join(paths)}", err=True)
    if fix or diff:
        return fix_and_report(result, diff, format_.value, recheck)
    if result.findings or format_ != Format.text:
        typer.echo(format_findings(result.findings, format_.value))
    if format_ == Format.text:
        typer.echo(f"{counted(result.findings, 'finding')} in {counted(result.files, 'file')}")
    return result.exit_code


def main() -> None:
    # The handler set while this module loaded stays until OneLineErrors.main begins: Typer
    # builds the command first, and a Ctrl-C then has nothing to clean up either.
    app()


interrupts.restore_unless_scaffold()
