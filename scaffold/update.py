"""Update a generated project to a newer template version, or change its answers, with copier.

The project must be a clean git work tree: copier computes the user's edits as the diff
between the project and a fresh render of the old version, and re-applies them on the new one.
Everything that can be checked is checked before the project changes, and a failure after that
puts back the exact commit and tree the project had: an update applies whole or not at all.
"""

import contextlib
import dataclasses
import json
import re
import subprocess
import warnings
from dataclasses import dataclass
from pathlib import Path

from scaffold.errors import ScaffoldError, UsageError, first_line, require_git
from scaffold.options import OPTIONS, Options
from scaffold.render import ANSWERS_FILE
from scaffold.source import (
    HASH,
    History,
    Source,
    builtin_source,
    has_uncommitted_template,
    is_builtin_location,
    is_remote,
    user_source,
)

CHANGEABLE = {f.name: f.type for f in dataclasses.fields(Options)}


@dataclass
class UpdateResult:
    before: str  # the template commit the project was on
    after: str  # and the one it is on now
    changed: list[str]  # files the update changed, added or deleted
    conflicts: list[str]  # files left with conflict markers
    repointed: str | None = None  # a new template source recorded (and committed) first
    notes: list[str] = dataclasses.field(default_factory=list)  # what the user should know


@dataclass
class Plan:
    """What an update will do, known before anything changes."""

    source: Source  # the new version: what the project will record, and the ref to render
    current: str  # the template commit the project records
    target: str | None  # full hash of the new version; None when only a fetch could tell
    current_hash: str | None  # full hash of the recorded commit, when the source lists it
    notes: list[str]  # why the recorded source changes, or what was left out


def parse_sets(items: list[str]) -> dict:
    """KEY=VALUE pairs, typed like the Options fields; anything else is a UsageError."""
    valid = ", ".join(CHANGEABLE)
    values = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in CHANGEABLE:
            raise UsageError(f"--set {item!r}: expected KEY=VALUE with KEY one of: {valid}")
        kind = CHANGEABLE[key]
        if kind is bool:
            if text.lower() not in ("true", "false", "yes", "no", "on", "off", "1", "0"):
                raise UsageError(f"--set {key}: expected true or false, not {text!r}")
            values[key] = text.lower() in ("true", "yes", "on", "1")
        elif kind in (int, float):
            try:
                values[key] = kind(text)
            except ValueError:
                raise UsageError(f"--set {key}: expected a number, not {text!r}") from None
        else:
            values[key] = text
    return values


def checked_options(recorded: dict, sets: dict) -> Options:
    """The project's options after --set, checked as scaffold new checks them; a bad value
    that comes from the answers file is blamed on the file, not on a flag."""
    try:
        options = Options(**{**recorded, **sets})
        options.validate(as_setting=True)  # "seed=-1: ...", as --set writes it
    except (UsageError, TypeError, ValueError) as err:
        message = first_line(err)
        setting = re.match(r"(\w+)=", message)
        name = setting.group(1) if setting else None
        if name in sets:
            raise UsageError(f"--set {message}") from None
        hint = f"; fix it, or pass --set {name}=VALUE" if name else ""
        raise UsageError(f"{ANSWERS_FILE} records a bad answer: {message}{hint}") from None
    refuse_unused_sets(sets, options)
    return options


def refuse_unused_sets(sets: dict, options: Options) -> None:
    """A --set of a follow-up answer whose switch stays off would change nothing: refuse it
    (copier.yml says which switch each answer follows)."""
    for name in sets:
        question = OPTIONS.get(name)
        if question and question.parent:
            switch, value = question.parent
            if getattr(options, switch) != value:
                needed = f"{switch}={str(value).lower()}"
                raise UsageError(
                    f"--set {name} applies only with {needed}; add --set {needed} or drop it"
                )


NEEDS_GIT = "scaffold update merges your edits with git"


def git(project: Path, *args: str, check: bool = True) -> str:
    try:
        result = subprocess.run(["git", *args], cwd=project, capture_output=True, text=True)
    except FileNotFoundError:  # git left PATH (or was removed) while the update ran
        require_git(NEEDS_GIT)
        raise
    if check and result.returncode != 0:
        lines = result.stderr.strip().splitlines() or [f"exit code {result.returncode}"]
        reason = next((line for line in lines if line.startswith("fatal:")), lines[0])
        raise ScaffoldError(f"git {' '.join(args)} failed: {reason}")
    return result.stdout.rstrip("\n")


def check_clean_repository(project: Path) -> None:
    """Refuse a project that is not in git or has uncommitted changes, naming them."""
    if not project.is_dir():
        raise UsageError(f"{project} is not a folder")
    require_git(NEEDS_GIT)
    inside = git(project, "rev-parse", "--is-inside-work-tree", check=False)
    if inside.strip() != "true":
        raise ScaffoldError(
            f"{project} is not in a git repository; updates merge your edits with git: "
            "run git init && git add -A && git commit -m 'Generated project' first"
        )
    # --untracked-files=all whatever the user's config says: a failed update cleans up
    # untracked files, so every one of the user's must have been seen here.
    status = git(project, "status", "--porcelain", "--untracked-files=all")
    dirty = [line[3:] for line in status.splitlines()]
    if dirty:
        shown = ", ".join(dirty[:8]) + (f" and {len(dirty) - 8} more" if len(dirty) > 8 else "")
        raise ScaffoldError(f"uncommitted changes in {shown}; commit or stash them first")


def read_project_answers(project: Path) -> dict:
    """The project's answers file, refused in one line unless copier can update from it."""
    import yaml  # a dependency of copier

    path = project / ANSWERS_FILE
    restore = f"restore it from git (git log -p -- {ANSWERS_FILE})"
    if not project.is_dir():
        raise UsageError(f"{project} is not a folder")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        message = f"{project} has no {ANSWERS_FILE}: not a generated project"
        raise ScaffoldError(message, 2) from None
    except (OSError, UnicodeDecodeError) as err:
        raise ScaffoldError(f"cannot read {path}: {first_line(err)}", 2) from None
    try:
        answers = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        problem = getattr(err, "problem", None) or first_line(err)
        raise ScaffoldError(f"{where}: not valid YAML ({problem}); {restore}", 2) from None
    if answers is None:
        raise ScaffoldError(f"{path} is empty; {restore}", 2)
    if not isinstance(answers, dict):
        raise ScaffoldError(
            f"{path} holds {type(answers).__name__}, not copier's answers (KEY: VALUE lines); "
            + restore,
            2,
        )
    for key, what in (("_src_path", "template source"), ("_commit", "template commit")):
        if not isinstance(answers.get(key), (str, int)) or answers[key] in ("", True, False):
            raise ScaffoldError(
                f"{path} has no {key} (the {what} the project was rendered from), which copier "
                f"needs to find your edits; {restore}",
                2,
            )
        answers[key] = str(answers[key])
    return answers


def short(commit: str | None) -> str:
    """The hash in copier's record of a commit ('v1.0-3-gabc1234', 'abc1234' or a full hash)."""
    if not commit:
        return "unknown"
    match = re.search(r"(?:-g)?([0-9a-f]{7,40})$", commit)
    return match.group(1)[:7] if match else commit


def recorded_source(answers: dict, to: str | None) -> tuple[Source, list[str]]:
    """The source the project records, or scaffold's own template when that is what it was."""
    recorded = answers["_src_path"]
    builtin = builtin_source()
    if recorded == builtin.path:
        return Source(builtin.path, to or builtin.ref), []
    if is_remote(recorded) or Path(recorded).exists():
        return Source(recorded, to), []
    if is_builtin_location(recorded):
        note = (
            f"the recorded template source {recorded} is gone; it was scaffold's own template, "
            f"so the project now records this installation's: {builtin.path}"
        )
        return Source(builtin.path, to or builtin.ref), [note]
    raise ScaffoldError(
        f"the template source {recorded} recorded in {ANSWERS_FILE} no longer exists; pass "
        "--template SRC: a path or git URL of that template, with its git history"
    )


def plan_update(answers: dict, template: str | None = None, to: str | None = None) -> Plan:
    """Check the source, the ref and the recorded commit; change nothing."""
    if template:
        source, notes = user_source(template, to, ref_flag="--to"), []
    else:
        source, notes = recorded_source(answers, to)
    current = answers["_commit"]
    with History(source) as history:
        ref = source.ref or history.default_ref()
        target = history.commit(ref)
        if target is None and (history.knows_every_commit or not HASH.fullmatch(ref)):
            if to:
                raise UsageError(
                    f"--to {to}: {source.path} has no tag, branch or commit named {to}"
                )
            raise ScaffoldError(f"{source.path} has no commit {ref}")
        current_hash = history.commit(current)
        if current_hash is None and history.knows_every_commit:
            raise ScaffoldError(
                f"{source.path} does not have template commit {current}, which {ANSWERS_FILE} "
                "says the project was rendered from; copier needs it to find your edits (was "
                "the project rendered from uncommitted template edits? then pass --template "
                "with a copy that has that commit)"
            )
    if not source.remote and target:
        if has_uncommitted_template(Source(source.path, "HEAD")) and ref == "HEAD":
            notes.append(
                f"{source.path} has uncommitted template edits: updating to its last commit"
            )
        # A commit, never "HEAD": for a local checkout at "HEAD" copier renders uncommitted
        # files from a temporary commit, and the project would record a commit that is nowhere.
        source = Source(source.path, target)
    return Plan(source, current, target, current_hash, notes)


def check_for_update(project: Path, template: str | None = None, to: str | None = None) -> tuple:
    """(current, available, newer?) without changing anything; newer is None when unknown."""
    plan = plan_update(read_project_answers(project), template, to)
    if plan.target is None:
        return short(plan.current), plan.source.ref, None
    if plan.current_hash:
        newer = plan.target != plan.current_hash
    else:
        newer = not plan.target.startswith(short(plan.current))
    return short(plan.current), plan.target[:7], newer


def update_project(
    project: str | Path, sets: dict, to: str | None = None, template: str | None = None
) -> UpdateResult:
    """Re-render `project` with the new template version and answers, keeping the user's edits.

    Nothing is committed unless the whole update succeeds; on any failure (Ctrl-C included)
    the project is put back to the commit and tree it had.
    """
    project = Path(project).absolute()
    read_project_answers(project)  # a project scaffold made, or one line saying what it is not
    check_clean_repository(project)
    with update_lock(project):
        # Checked again holding the lock: an update that finished meanwhile may have left
        # changes to review (conflicts, or its result not committed yet).
        check_clean_repository(project)
        return _update_locked(project, read_project_answers(project), sets, to, template)


@contextlib.contextmanager
def update_lock(project: Path):
    """Hold the project's update lock (a file in its git folder, locked with flock) while the
    block runs; a second update of the same project meanwhile is refused in one line. The
    kernel releases the lock when the process ends, however it ends."""
    try:
        import fcntl
    except ImportError:  # Windows: no flock; updates there are not guarded against each other
        yield
        return
    path = Path(git(project, "rev-parse", "--absolute-git-dir")) / "scaffold-update.lock"
    with open(path, "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ScaffoldError(
                f"another scaffold update is running in {project}; wait for it to finish"
            ) from None
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _update_locked(
    project: Path, answers: dict, sets: dict, to: str | None, template: str | None
) -> UpdateResult:
    current = {key: answers[key] for key in CHANGEABLE if key in answers}
    options = checked_options(current, sets)
    plan = plan_update(answers, template, to)
    head = git(project, "rev-parse", "--verify", "-q", "HEAD", check=False)
    if not head:
        raise ScaffoldError(f"{project} has no commit yet; commit the generated project first")

    import copier

    repointed = None
    try:
        if plan.source.path != answers["_src_path"]:
            # copier renders the old version from the recorded source, and only from a clean
            # tree: record the new source (it has the old commit, checked above) in a commit.
            _record_source(project, plan.source.path)
            repointed = plan.source.path
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            copier.run_update(
                project,
                data=options.answers(),
                defaults=True,  # never prompt
                overwrite=True,  # required by copier to update
                conflict="inline",  # markers in the file, never a .rej that is easy to lose
                vcs_ref=plan.source.ref,
                settings=copier.Settings(),
                quiet=True,
            )
    except ScaffoldError:
        _restore(project, head)
        raise
    except Exception as err:  # copier's own errors, ValueError for answers, Jinja's, git's
        _restore(project, head)
        raise ScaffoldError(
            f"copier could not update the project: {_reason(err)}; the project is as it was"
        ) from None
    except BaseException:  # Ctrl-C: put the project back, then let the CLI report it
        _restore(project, head)
        raise

    conflicts = git(project, "diff", "--name-only", "--diff-filter=U").splitlines()
    status = git(project, "status", "--porcelain", "--untracked-files=all")
    changed = [line[3:] for line in status.splitlines()]
    after = read_project_answers(project)["_commit"]
    return UpdateResult(plan.current, after, changed, conflicts, repointed, plan.notes)


def _reason(err: BaseException) -> str:
    """The first line of the error, or of its cause when it has no message of its own (copier's
    InvalidTypeError, for one, carries its reason only as the cause)."""
    for error in (err, err.__cause__, err.__context__):
        if error is not None and str(error).strip():
            return (
                first_line(error) if error is err else f"{type(err).__name__}: {first_line(error)}"
            )
    return type(err).__name__


def _record_source(project: Path, path: str) -> None:
    answers_file = project / ANSWERS_FILE
    text = answers_file.read_text()
    new, count = re.subn(r"(?m)^_src_path: .*$", lambda _: f"_src_path: {json.dumps(path)}", text)
    if count != 1:
        raise ScaffoldError(f"{ANSWERS_FILE} has no _src_path line to update")
    answers_file.write_text(new)
    git(project, "add", ANSWERS_FILE)
    git(project, "commit", "-q", "--no-verify", "-m", f"scaffold: record template source {path}")


def _restore(project: Path, head: str) -> None:
    """Put back the commit and tree the project had (it was clean: nothing of the user's is
    untracked, so every untracked file now is the failed update's)."""
    git(project, "reset", "-q", "--hard", head, check=False)
    git(project, "clean", "-fdq", check=False)
