"""The `scaffold` command line: parses, asks and reports; render.py and smoke.py do the work."""

# ruff: noqa: E402 - the Ctrl-C handler must be in place before the slower imports below
import os
import sys

try:  # the C module behind `signal`, which would first import enum (~10 ms more to wait)
    import _signal as early_signal
except ImportError:  # not CPython
    import signal as early_signal


def _exit_interrupted(signum, frame):
    # Only imports are running: nothing to clean up, and an exception raised in the middle of
    # one may be swallowed by the import machinery; exit at once.
    sys.stderr.write("interrupted; nothing was written\n")
    sys.stderr.flush()
    os._exit(130)


# The console script imports this module before main() runs, and typer takes a while to load:
# a Ctrl-C in that time must already be one line and exit 130. OneLineErrors.main replaces
# the handler; a program that only imports this module (a test run) gets its own back at the
# end of the module.
_RUN_AS_SCAFFOLD = "scaffold" in (
    os.path.basename(sys.argv[0]),  # the console script
    os.path.basename(os.path.dirname(sys.argv[0])),  # python -m scaffold: scaffold/__main__.py
)
try:
    _sigint_before = early_signal.signal(early_signal.SIGINT, _exit_interrupted)
except ValueError:  # imported outside the main thread, where no handler can be set
    _sigint_before = None

import signal
import threading
import time
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from typer.core import TyperGroup

from scaffold import __version__
from scaffold.errors import Interrupted, ScaffoldError, UsageError
from scaffold.options import (
    DEFAULTS,
    OPTIONS,
    Options,
    Question,
    complete,
    default_of,
    problem_with,
    unused_flags,
)

# The project `new` has moved into place, once it exists. A Ctrl-C can land after `new` has
# returned, while Click closes its context; the message then must still say the project is kept.
_placed: list[Path] = []


def _interrupted_message() -> str:
    if _placed:
        return f"interrupted; the project in {_placed[0]} is complete and kept"
    return "interrupted; nothing was written"


class OneLineErrors(TyperGroup):
    """Report every error as one line on stderr with exit code 2 (usage) or 1, no traceback."""

    command = None  # the subcommand being run, once Click has found it

    def resolve_command(self, ctx, args):
        name, command, rest = super().resolve_command(ctx, args)
        self.command = name
        return name, command, rest

    def main(self, *args, standalone_mode: bool = True, **kwargs):
        if _sigint_before is not None and signal.getsignal(signal.SIGINT) is _exit_interrupted:
            # From here on a Ctrl-C raises KeyboardInterrupt, which each step turns into one
            # line that says what was kept.
            signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            code = self._outcome(*args, **kwargs)
            _ignore_late_interrupts()
        except KeyboardInterrupt:  # after the command ended, before the line above
            _ignore_late_interrupts()
            typer.echo(_interrupted_message(), err=True)
            code = 130
        sys.exit(code)

    def _outcome(self, *args, **kwargs) -> int:
        """Run the command; report how it ended in one line, and return the exit code."""
        try:
            result = super().main(*args, standalone_mode=False, **kwargs)
        except Interrupted as err:
            typer.echo(str(err), err=True)
            return err.exit_code
        except ScaffoldError as err:
            typer.echo(f"error: {err}", err=True)
            return err.exit_code
        except typer.TyperException as err:  # bad flags or values: Typer's usage errors
            typer.echo(f"error: {err.format_message()}", err=True)
            return 2
        except typer.Abort:
            typer.echo(_interrupted_message().replace("interrupted", "aborted", 1), err=True)
            return 130
        if result == 130:  # Typer turns a Ctrl-C that no command caught into a silent 130
            # `new` reports its own interrupts; one that reaches here came before it began or
            # after it returned.
            said = _interrupted_message() if self.command in (None, "new") else "interrupted"
            typer.echo(said, err=True)
        return result if isinstance(result, int) else 0


def _ignore_late_interrupts() -> None:
    # The command has ended and said how. A Ctrl-C during the interpreter's shutdown would
    # otherwise kill it silently (exit -2) after a successful run. Only the real command does
    # this: a test that calls the app in-process keeps its own Ctrl-C.
    if _RUN_AS_SCAFFOLD and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


app = typer.Typer(
    cls=OneLineErrors,
    help="Generate PyTorch training projects whose loops are correctly ordered, and prove it.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,  # plain help: readable in any terminal width, and starts faster
)


def _choices(name: str) -> type[Enum]:
    return Enum(name.title(), [(value, value) for value in OPTIONS[name].choices], type=str)


Task = _choices("task")
Scheduler = _choices("scheduler")


def _help(name: str) -> str:
    """An option's --help line: copier.yml's help, the switch it needs, and its default."""
    question = OPTIONS[name]
    text = question.help
    if question.parent:
        text += f" (with {question.parent_flag()})"
    default = DEFAULTS[name]
    if question.type is bool:
        default = "on" if default else "off"
    return f"{text}. [default: {default}]"


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


def _ask(question: Question, answers: dict):
    """Ask one question until the answer passes its copier.yml validator."""
    typer.secho(f"  {question.help}", dim=True, err=True)
    label = question.name.replace("_", " ")
    if question.choices:
        label = f"{label} ({'/'.join(question.choices)})"
    default = default_of(question, answers)
    while True:
        if question.type is bool:
            answer = typer.confirm(label, default=default, err=True)
        else:
            answer = typer.prompt(label, default=default, type=question.type, err=True)
        problem = problem_with(question, {**answers, question.name: answer})
        if not problem:
            return answer
        typer.echo(f"  {problem}", err=True)


def resolve_options(given: dict, interactive: bool) -> Options:
    """Fill the options not given on the command line: ask for each, or take its default.

    A follow-up flag whose switch is off (--patience without --early-stopping) is refused:
    the project would not use it.
    """
    values = {}
    for question in OPTIONS.values():
        if question.parent and values[question.parent[0]] != question.parent[1]:
            continue
        if given.get(question.name) is not None:
            values[question.name] = given[question.name]
        else:
            values[question.name] = (
                _ask(question, values) if interactive else default_of(question, values)
            )
    options = complete(values)
    unused = unused_flags(given, options)
    if unused:
        raise UsageError(unused[0])
    options.validate()
    return options


@app.command()
def new(
    dest: Annotated[
        str,
        typer.Argument(metavar="DEST", help="Folder to create; its name is the project's name."),
    ],
    task: Annotated[Task | None, typer.Option(help=_help("task"))] = None,
    scheduler: Annotated[Scheduler | None, typer.Option(help=_help("scheduler"))] = None,
    plateau_patience: Annotated[int | None, typer.Option(help=_help("plateau_patience"))] = None,
    amp: Annotated[bool | None, typer.Option("--amp/--no-amp", help=_help("amp"))] = None,
    clip: Annotated[bool | None, typer.Option("--clip/--no-clip", help=_help("clip"))] = None,
    max_grad_norm: Annotated[float | None, typer.Option(help=_help("max_grad_norm"))] = None,
    grad_accum: Annotated[int | None, typer.Option(help=_help("grad_accum"))] = None,
    warmup_steps: Annotated[int | None, typer.Option(help=_help("warmup_steps"))] = None,
    early_stopping: Annotated[
        bool | None,
        typer.Option("--early-stopping/--no-early-stopping", help=_help("early_stopping")),
    ] = None,
    patience: Annotated[int | None, typer.Option(help=_help("patience"))] = None,
    distributed: Annotated[
        bool | None,
        typer.Option("--distributed/--no-distributed", help=_help("distributed")),
    ] = None,
    ema: Annotated[bool | None, typer.Option("--ema/--no-ema", help=_help("ema"))] = None,
    ema_decay: Annotated[float | None, typer.Option(help=_help("ema_decay"))] = None,
    compile: Annotated[
        bool | None, typer.Option("--compile/--no-compile", help=_help("compile"))
    ] = None,
    seed: Annotated[int | None, typer.Option(help=_help("seed"))] = None,
    git: Annotated[
        bool,
        typer.Option(
            "--git/--no-git",
            help="Make DEST a git repository with a first commit of the project, so scaffold "
            "update works at once. [default: on; skipped with a note when git is not on PATH "
            "or DEST is inside a git work tree; a git failure is a warning, and the project is "
            "kept]",
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
) -> int:
    """Create a new PyTorch training project in DEST.

    Options not given are asked for when stdin is a terminal; with -y, or without a
    terminal, they take their defaults.
    """
    given = {
        "task": task.value if task else None,
        "scheduler": scheduler.value if scheduler else None,
        "plateau_patience": plateau_patience,
        "amp": amp,
        "clip": clip,
        "max_grad_norm": max_grad_norm,
        "grad_accum": grad_accum,
        "warmup_steps": warmup_steps,
        "early_stopping": early_stopping,
        "patience": patience,
        "distributed": distributed,
        "ema": ema,
        "ema_decay": ema_decay,
        "compile": compile,
        "seed": seed,
    }
    _placed.clear()  # an earlier call in this process (a test run) placed its own project
    try:
        from scaffold.render import create_project  # imports copier

        if template is None and vcs_ref is not None:
            raise UsageError("--vcs-ref goes with --template")
        interactive = stdin_is_interactive() and not defaults and template is None
        if template is None:
            answers = resolve_options(given, interactive)
        else:  # that template's own defaults fill the gaps
            answers = {key: value for key, value in given.items() if value is not None}
        started = time.perf_counter()
        created = create_project(
            dest, answers, template=template, vcs_ref=vcs_ref, force=force, placed=_placed
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
        _make_repository(created, git, quiet)
        exit_code = _smoke_check(created, smoke, quiet)
        if not quiet:
            _print_next_steps(created.result.dest, created.package)
        return exit_code
    except KeyboardInterrupt:
        raise Interrupted(_interrupted_message()) from None


def _report_created(created, seconds: float) -> None:
    result = created.result
    typer.echo(f"Created {result.dest.name}: {describe_answers(result.answers)}")
    typer.echo(f"  {len(result.files)} files in {result.dest} ({seconds:.1f} s)")
    for backup in result.backups:
        typer.echo(f"  kept your earlier {backup.with_suffix('')} as {backup}")
    for stale in result.removed:
        typer.echo(f"  removed {stale.name}, left by a scaffold new that was killed", err=True)


def _make_repository(created, git: bool, quiet: bool) -> None:
    """Commit the project to a new repository; whatever git does, the project is kept."""
    from scaffold import git_init

    project = created.result.dest
    by_hand = f"cd {project} && git init && git add -A && git commit -m 'Generated project'"
    if not git:
        if not quiet:
            typer.echo(f"  no git repository (--no-git); scaffold update needs one: {by_hand}")
        return
    message = f"Generated by scaffold {__version__}: {describe_answers(created.result.answers)}"
    outcome = git_init.make_repository(project, created.result.files, message)
    if outcome.failed:  # a warning, which --quiet does not hide
        typer.echo(
            f"warning: no git repository made ({outcome.failed}); the project is complete; "
            f"make one with: {by_hand}",
            err=True,
        )
        return
    if quiet:
        return
    if outcome.skipped:
        typer.echo(f"  no git repository made: {outcome.skipped}")
        if outcome.skipped == git_init.NO_GIT:
            typer.echo(f"  scaffold update needs one; once git is installed: {by_hand}")
        return
    made = f"  git repository made: first commit {outcome.commit} on {outcome.branch}"
    # From uncommitted template edits the project cannot update, repository or not (warned above).
    typer.echo(made if created.uncommitted else f"{made}; scaffold update works from here")
    if outcome.fallback_identity:
        unset = " and ".join(outcome.fallback_identity)
        filled = ", ".join(f"{k}={v}" for k, v in outcome.fallback_identity.items())
        typer.echo(
            f"  your git has no {unset}: committed with {filled}; set yours with git config "
            "--global, then git commit --amend --reset-author --no-edit makes the commit yours"
        )
    if outcome.untracked:
        shown = ", ".join(outcome.untracked[:5])
        more = f" and {len(outcome.untracked) - 5} more" if len(outcome.untracked) > 5 else ""
        typer.echo(
            f"  left out of the commit, as they were in DEST before: {shown}{more}; commit or "
            "ignore them before scaffold update"
        )


def _smoke_check(created, smoke: bool | None, quiet: bool) -> int:
    """Run the smoke check where it can run; the project is kept whatever it finds."""
    from scaffold import smoke as smoke_check

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
    from scaffold.check.report import format_findings
    from scaffold.check.rules import unknown_selectors
    from scaffold.check.run import check_paths

    select, ignore = _codes(select), _codes(ignore)
    unknown = unknown_selectors(select + ignore)
    if unknown:
        raise UsageError(f"no check is named {unknown[0]!r}; codes look like SCF201, rules R2")
    settings = load_settings().with_flags(select, ignore)
    targets = listed_files(paths, settings.excluded) if settings.exclude else paths
    result = check_paths(targets, settings.select, settings.ignored)
    for problem in result.problems:
        typer.echo(f"error: {problem}", err=True)
    for note in result.notes:
        typer.echo(f"note: {note}", err=True)
    if not result.files and not result.problems:  # a mistyped folder would pass silently
        typer.echo(f"warning: no Python file found in {', '.join(paths)}", err=True)
    if fix or diff:
        return _check_fix(
            result, diff, format_, lambda: check_paths(targets, settings.select, settings.ignored)
        )
    if result.findings or format_ != Format.text:
        typer.echo(format_findings(result.findings, format_.value))
    if format_ == Format.text:
        typer.echo(f"{_count(result.findings, 'finding')} in {_count(result.files, 'file')}")
    return result.exit_code


def _check_fix(result, diff_only: bool, format_: Format, recheck) -> int:
    """--fix and --diff: make (or show) the unambiguous fixes, then report what is left."""
    from scaffold.check.fix import plan_fixes, write_fix
    from scaffold.check.report import format_findings

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
    if after.findings or format_ != Format.text:
        typer.echo(format_findings(after.findings, format_.value))
    summary = f"fixed {fixed}, {len(after.findings)} left in {_count(after.files, 'file')}"
    typer.echo(summary, err=format_ != Format.text)
    if problems:
        return 2
    return 1 if after.findings else 0


def _count(number: int | list, noun: str) -> str:
    number = number if isinstance(number, int) else len(number)
    return f"{number} {noun}{'s' if number != 1 else ''}"


def _print_next_steps(dest: Path, package: str) -> None:
    try:
        where = dest.relative_to(Path.cwd())
    except ValueError:
        where = dest
    typer.echo(
        "Next:\n"
        f"  cd {where}\n"
        "  python -m venv .venv && . .venv/bin/activate\n"
        "  pip install torch --index-url https://download.pytorch.org/whl/cpu"
        "   # or the CUDA build: see README.md\n"
        '  pip install -e ".[dev]"\n'
        f"  python -m {package}.train --epochs 20 --out runs/first\n"
        "  python -m pytest -q\n"
        "Its tests guard the training loop: a change that breaks one of the rules in its README\n"
        "(zero_grad before backward, clipping before the step, ...) fails them, naming the rule."
    )


def main() -> None:
    # The handler set while this module loaded stays until OneLineErrors.main begins: Typer
    # builds the command first, and a Ctrl-C then has nothing to clean up either.
    app()


if _sigint_before is not None and not _RUN_AS_SCAFFOLD:
    signal.signal(signal.SIGINT, _sigint_before)
