"""Update a generated project to a newer template version, or change its answers, with copier.

The project must be a clean git work tree: copier computes the user's edits as the diff
between the project and a fresh render of the old version, and re-applies them on the new one.
"""

import dataclasses
import re
import subprocess
import warnings
from dataclasses import dataclass
from pathlib import Path

from scaffold.errors import ScaffoldError, UsageError, first_line
from scaffold.options import Options
from scaffold.render import ANSWERS_FILE, read_answers
from scaffold.source import Source, builtin_source, resolve_commit, user_source

CHANGEABLE = {f.name: f.type for f in dataclasses.fields(Options)}


@dataclass
class UpdateResult:
    before: str  # the template commit the project was on
    after: str  # and the one it is on now
    changed: list[str]  # files the update changed, added or deleted
    conflicts: list[str]  # files left with conflict markers
    repointed: str | None = None  # a new template source recorded (and committed) first


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


def git(project: Path, *args: str, check: bool = True) -> str:
    result = subprocess.run(["git", *args], cwd=project, capture_output=True, text=True)
    if check and result.returncode != 0:
        raise ScaffoldError(f"git {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout.rstrip("\n")


def check_clean_repository(project: Path) -> None:
    """Refuse a project that is not in git or has uncommitted changes, naming them."""
    if not project.is_dir():
        raise UsageError(f"{project} is not a folder")
    inside = subprocess.run(
        ["git", "rev-parse", "--is-inside-work-tree"], cwd=project, capture_output=True, text=True
    )
    if inside.stdout.strip() != "true":
        raise ScaffoldError(
            f"{project} is not in a git repository; updates merge your edits with git: "
            "run git init && git add -A && git commit -m 'Generated project' first"
        )
    dirty = [line[3:] for line in git(project, "status", "--porcelain").splitlines()]
    if dirty:
        shown = ", ".join(dirty[:8]) + (f" and {len(dirty) - 8} more" if len(dirty) > 8 else "")
        raise ScaffoldError(f"uncommitted changes in {shown}; commit or stash them first")


def short(commit: str | None) -> str:
    """The hash in copier's record of a commit ('v1.0-3-gabc1234', 'abc1234' or a full hash)."""
    if not commit:
        return "unknown"
    match = re.search(r"(?:-g)?([0-9a-f]{7,40})$", commit)
    return match.group(1)[:7] if match else commit


def update_source(answers: dict, template: str | None, to: str | None) -> Source:
    """Where to take the new version from: --template, else the recorded source."""
    if template:
        return user_source(template, to)
    recorded = answers.get("_src_path", "")
    builtin = builtin_source()
    missing_local_copy = not Path(recorded).exists() and "://" not in recorded
    if recorded == builtin.path or missing_local_copy:
        # scaffold's own template (or a recorded copy of it that is gone): this installation's.
        return Source(builtin.path, to or builtin.ref)
    return Source(recorded, to)


def check_for_update(project: Path, template: str | None = None, to: str | None = None) -> tuple:
    """(current, available, newer?) without changing anything."""
    answers = read_answers(project)
    source = update_source(answers, template, to)
    current, available = answers.get("_commit"), resolve_commit(source)
    newer = None if available is None else not available.startswith(short(current))
    return short(current), short(available) if available else "unknown", newer


def update_project(
    project: str | Path, sets: dict, to: str | None = None, template: str | None = None
) -> UpdateResult:
    """Re-render `project` with the new template version and answers, keeping the user's edits."""
    project = Path(project).absolute()
    answers = read_answers(project)
    check_clean_repository(project)
    current = {key: answers[key] for key in CHANGEABLE if key in answers}
    try:
        options = Options(**{**current, **sets})
    except TypeError as err:
        raise UsageError(str(err)) from None
    options.validate()
    source = update_source(answers, template, to)

    repointed = None
    if source.path != answers.get("_src_path"):
        # copier re-renders the old version from the recorded source: record the new one
        # (a copy that has the same history) in a commit of its own.
        _record_source(project, source.path)
        repointed = source.path

    import copier
    from copier.errors import CopierError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            copier.run_update(
                project,
                data=options.answers(),
                defaults=True,  # never prompt
                overwrite=True,  # required by copier to update
                conflict="inline",  # markers in the file, never a .rej that is easy to lose
                vcs_ref=source.ref,
                settings=copier.Settings(),
                quiet=True,
            )
    except (CopierError, ValueError) as err:
        message = first_line(err)
        if "Unknown revision" in message:
            message += (
                f" (the project records template commit {answers.get('_commit')}, which "
                f"{source.path} does not have; was it rendered from uncommitted template edits?)"
            )
        raise ScaffoldError(f"copier could not update the project: {message}") from None

    conflicts = git(project, "diff", "--name-only", "--diff-filter=U").splitlines()
    changed = [line[3:] for line in git(project, "status", "--porcelain").splitlines()]
    after = read_answers(project).get("_commit")
    return UpdateResult(answers.get("_commit", ""), after or "", changed, conflicts, repointed)


def _record_source(project: Path, path: str) -> None:
    answers_file = project / ANSWERS_FILE
    text = answers_file.read_text()
    new, count = re.subn(r"(?m)^_src_path: .*$", f"_src_path: {path}", text)
    if count != 1:
        raise ScaffoldError(f"{ANSWERS_FILE} has no _src_path line to update")
    answers_file.write_text(new)
    git(project, "add", ANSWERS_FILE)
    git(project, "commit", "-q", "-m", f"scaffold: record template source {path}")
