"""Make a new project a git repository with one commit, so that `scaffold update` works at once."""

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

NO_GIT = "git is not on PATH"
# Used only for what the user's git leaves unset: their configured identity always wins.
FALLBACK_IDENTITY = {"user.name": "scaffold", "user.email": "scaffold@localhost"}
# Where git reads each part of the identity besides its config (see git-commit-tree(1)).
IDENTITY_VARIABLES = {
    "user.name": (("GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME"),),
    "user.email": (("GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL"), ("EMAIL",)),
}
# Set by a git hook or a wrapper, these would point every command at another repository.
LOCATION_VARIABLES = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_PREFIX",
)


@dataclass
class GitOutcome:
    """What happened to the project's repository; new_repository.py says it."""

    commit: str | None = None  # the first commit's short hash, when a repository was made
    branch: str | None = None
    fallback_identity: dict = field(default_factory=dict)  # settings scaffold filled in
    untracked: list[str] = field(default_factory=list)  # DEST's own files (--force): left out
    skipped: str | None = None  # why no repository was made, when that is expected
    failed: str | None = None  # git's error: the project is kept, without a repository


class GitFailed(Exception):
    pass


def make_repository(dest: Path, files: list[Path], message: str) -> GitOutcome:
    """`git init` in DEST and commit the rendered `files` (paths relative to DEST).

    Skipped when git is missing or DEST already lies in a work tree (its repository is the
    user's). A failing git removes the half-made repository: the project stays, without one.
    """
    if shutil.which("git") is None:
        return GitOutcome(skipped=NO_GIT)
    env = {key: value for key, value in os.environ.items() if key not in LOCATION_VARIABLES}
    top = _git(dest, env, "rev-parse", "--show-toplevel", check=False)
    # A folder the enclosing repository ignores (scaffold's own demo/, a scratch folder) is not
    # the user's to commit there: it gets a repository of its own, so `scaffold update` works.
    if top is not None and not _ignored_by(top, dest, env):
        return GitOutcome(skipped=f"{dest} is inside the git work tree {top}; commit it there")
    if os.path.lexists(dest / ".git"):  # something git cannot read as a repository: not ours
        return GitOutcome(skipped=f"{dest / '.git'} exists and is not a repository git can read")
    try:
        return _init_and_commit(dest, env, files, message)
    except GitFailed as err:
        shutil.rmtree(dest / ".git", ignore_errors=True)
        return GitOutcome(failed=str(err))
    except BaseException:  # Ctrl-C: no half-made repository either
        shutil.rmtree(dest / ".git", ignore_errors=True)
        raise


def _ignored_by(top: str, dest: Path, env: dict) -> bool:
    """Whether the work tree at `top` ignores `dest` (its .gitignore, exclude or global rules)."""
    return _git(Path(top), env, "check-ignore", "-q", "--", str(dest), check=False) is not None


def _init_and_commit(dest: Path, env: dict, files: list[Path], message: str) -> GitOutcome:
    _git(dest, env, "init", "-q")  # the user's init.defaultBranch and templates apply
    # Literal paths: a rendered name is never read as a pathspec pattern.
    _git(dest, env, "--literal-pathspecs", "add", "--", *(p.as_posix() for p in files))
    fallback = {key: FALLBACK_IDENTITY[key] for key in _missing_identity(dest, env)}
    settings = [f"{key}={value}" for key, value in fallback.items()]
    # No hooks for this one commit: a pre-commit hook installed by the user's git templates
    # would fetch ruff over the network before the project has even been seen.
    settings.append(f"core.hooksPath={os.devnull}")
    options = [arg for setting in settings for arg in ("-c", setting)]
    _git(dest, env, *options, "commit", "-q", "--no-verify", "-m", message)
    untracked = _git(dest, env, "ls-files", "-z", "--others", "--exclude-standard")
    return GitOutcome(
        commit=_git(dest, env, "rev-parse", "--short", "HEAD"),
        branch=_git(dest, env, "symbolic-ref", "--short", "HEAD"),
        fallback_identity=fallback,
        untracked=sorted(filter(None, untracked.split("\0"))),
    )


def _missing_identity(dest: Path, env: dict) -> list[str]:
    """The identity settings git would have to guess (from the host name, or fail on)."""
    missing = []
    for key, variable_sets in IDENTITY_VARIABLES.items():
        if any(all(env.get(name) for name in names) for names in variable_sets):
            continue
        if not _git(dest, env, "config", "--get", key, check=False):
            missing.append(key)
    return missing


def _git(dest: Path, env: dict, *args: str, check: bool = True) -> str | None:
    """git's output; on failure None, or GitFailed naming the command and git's reason."""
    try:
        result = subprocess.run(
            ["git", *args],
            cwd=dest,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
        )
    except OSError as err:
        if not check:
            return None
        raise GitFailed(f"git {_verb(args)}: {err.strerror}") from None
    if result.returncode != 0:
        if not check:
            return None
        lines = result.stderr.strip().splitlines() or [f"exit code {result.returncode}"]
        reason = next((line for line in lines if line.startswith(("fatal:", "error:"))), lines[0])
        raise GitFailed(f"git {_verb(args)} failed: {reason}")
    return result.stdout.strip()


def _verb(args: tuple[str, ...]) -> str:
    """The git command's name, past the -c settings and global flags."""
    rest = list(args)
    while rest and rest[0].startswith("-"):
        rest = rest[2:] if rest[0] == "-c" else rest[1:]
    return rest[0] if rest else "git"
