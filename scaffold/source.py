"""Where the template comes from: a git checkout, the wheel's bundle, or a source the user names.

Projects record the source in their answers file, and `copier update` re-renders the old
version from it, so the recorded path must outlive scaffold's virtual environment. A wheel's
bundle is therefore copied to a per-user folder (SCAFFOLD_HOME, default
~/.local/share/scaffold) and projects point there; each scaffold version refreshes that copy
only when its own history is longer, so older commits stay reachable.

`is_remote` is the one place that tells a git URL from a path on this machine; everything that
takes a source (scaffold new --template, scaffold update, its --check) goes through it.
"""

import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from scaffold.errors import ScaffoldError, UsageError, require_git

PACKAGED = Path(__file__).resolve().parent / "_template"
CHECKOUT = Path(__file__).resolve().parent.parent
BUNDLE_NAME = "template.bundle"
TEMPLATE_FILES = ("copier.yml", "template")  # scaffold's own template, in a checkout

# Git URLs: scheme://... (ssh, https, http, git, file, git+https, ...), copier's gh:/gl:
# shortcuts, and scp-like [user@]host:path (host of two characters or more: C:\ is a drive).
URL_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
SCP_LIKE = re.compile(r"^(?:[^@/:\\]+@)?[^@/:\\]{2,}:")
ALIASES = {"gh:": "https://github.com/", "gl:": "https://gitlab.com/"}
# What copier itself takes for git without help (copier/_vcs.py GIT_PREFIX); other URLs need
# "git+" in front, or copier reads them as a local folder that does not exist.
COPIER_GIT_PREFIXES = ("git@", "git://", "git+", "https://github.com/", "https://gitlab.com/")
REMOTE_TIMEOUT = 60  # seconds for git to list a remote's refs
HASH = re.compile(r"[0-9a-f]{7,40}")


@dataclass(frozen=True)
class Source:
    path: str  # what copier reads: a folder, a git repository, a bundle file or a URL
    ref: str | None  # the git ref to render, None for copier's default (latest tag, or HEAD)

    @property
    def remote(self) -> bool:
        return is_remote(self.path)

    def describe(self) -> str:
        return self.path if self.ref is None else f"{self.path} @ {self.ref}"


def is_remote(src: str) -> bool:
    """True for a git URL (fetched by git, file:// included), False for a path on this machine."""
    if src.startswith(tuple(ALIASES)) or URL_SCHEME.match(src):
        return True
    if src.startswith(("/", "~", ".")) or Path(src).exists():
        return False
    return bool(SCP_LIKE.match(src))


def git_url(src: str) -> str:
    """The URL git understands: copier's gh:/gl: shortcuts expanded, a "git+" prefix dropped."""
    for alias, base in ALIASES.items():
        if src.startswith(alias):
            rest = src[len(alias) :].lstrip("/")
            return base + (rest if rest.endswith(".git") else rest + ".git")
    return src.removeprefix("git+")


def copier_url(src: str) -> str:
    """A remote source as copier must be given it (and as the project then records it)."""
    if src.startswith(tuple(ALIASES)) or src.startswith(COPIER_GIT_PREFIXES):
        return src
    return src if src.endswith(".git") else "git+" + src


def scaffold_home() -> Path:
    """Per-user data folder that outlives any virtual environment."""
    if os.environ.get("SCAFFOLD_HOME"):
        return Path(os.environ["SCAFFOLD_HOME"]).expanduser().absolute()
    import platformdirs  # a dependency of copier

    return Path(platformdirs.user_data_dir("scaffold"))


def builtin_source() -> Source:
    """scaffold's own template, as updatable as the installation allows."""
    if (PACKAGED / BUNDLE_NAME).is_file():
        meta = json.loads((PACKAGED / "bundle.json").read_text())
        return Source(str(install_bundle()), meta["commit"])
    if (PACKAGED / "copier.yml").is_file():  # a wheel built without history (from an sdist)
        return Source(str(PACKAGED), None)
    if (CHECKOUT / "copier.yml").is_file():
        if not (CHECKOUT / ".git").exists():
            return Source(str(CHECKOUT), None)
        head = _git("-C", str(CHECKOUT), "rev-parse", "HEAD")
        if _git("-C", str(CHECKOUT), "status", "--porcelain", "--", *TEMPLATE_FILES) or not head:
            # Uncommitted template edits: "HEAD" makes copier render them (from a commit in
            # its temporary clone, which the project records; the CLI warns).
            return Source(str(CHECKOUT), "HEAD")
        # The commit itself, not "HEAD": given "HEAD", copier commits *any* untracked file of
        # the checkout (a demo project, say) in its clone, and the project records that commit.
        return Source(str(CHECKOUT), head)
    raise ScaffoldError(f"scaffold's template is missing (looked in {PACKAGED} and {CHECKOUT})")


def is_builtin_location(path: str) -> bool:
    """Whether a recorded source was scaffold's own template: its checkout, the wheel's
    template folder, or the bundle copy under any SCAFFOLD_HOME (scaffold names it)."""
    place = Path(path)
    return (
        place == CHECKOUT
        or place == PACKAGED
        or place.name == BUNDLE_NAME
        or place.parts[-2:] == ("scaffold", "_template")
    )


def has_uncommitted_template(source: Source) -> bool:
    """A checkout rendered at "HEAD" with uncommitted template edits: copier renders them, but
    records a commit that exists only in its temporary clone, so updates will not work.
    For scaffold's own checkout only copier.yml and template/ count; a demo project or notes
    beside them change nothing."""
    path = Path(source.path)
    if source.ref != "HEAD" or source.remote or not (path / ".git").exists():
        return False
    where = TEMPLATE_FILES if path.resolve() == CHECKOUT else ()
    return bool(_git("-C", str(path), "status", "--porcelain", "--", *where))


def install_bundle() -> Path:
    """Copy the wheel's bundle to SCAFFOLD_HOME unless a longer history is already there."""
    home = scaffold_home()
    bundle, meta_file = home / BUNDLE_NAME, home / "bundle.json"
    ours = json.loads((PACKAGED / "bundle.json").read_text())
    try:
        theirs = json.loads(meta_file.read_text())
    except (OSError, ValueError):
        theirs = None
    if theirs is None or not bundle.is_file() or theirs["commits"] < ours["commits"]:
        home.mkdir(parents=True, exist_ok=True)
        # Copy beside, then rename: a reader never sees half a bundle.
        shutil.copyfile(PACKAGED / BUNDLE_NAME, home / ".template.bundle.tmp")
        os.replace(home / ".template.bundle.tmp", bundle)
        meta_file.write_text(json.dumps(ours) + "\n")
    return bundle


def user_source(path: str, ref: str | None, ref_flag: str = "--vcs-ref") -> Source:
    """A template the user names: a git URL, or a local path (recorded absolute, so updates
    work from anywhere). Checked before anything renders: a URL must answer, and `ref` must
    name something in the source (`ref_flag` is the option the user gave it with). A local
    repository's default version is pinned to its commit, so copier never renders (and
    records) a temporary commit of uncommitted files."""
    if is_remote(path):
        source = Source(copier_url(path), ref)
    else:
        local = Path(path).expanduser()
        if not local.exists():
            raise UsageError(
                f"template source not found: {path} is no folder or file here, and not a git "
                "URL (git@host:team/repo.git, https://host/team/repo.git, gh:team/repo)"
            )
        source = Source(str(local.absolute()), ref)
        if local.is_dir() and ref is None and not any(local.glob("copier.y*ml")):
            # copier would render every file of the folder as the project (any folder, any
            # size): not a template.
            raise UsageError(
                f"{path} is not a copier template: it has no copier.yml (or copier.yaml)"
            )
        if not _is_repository_root(local) and not local.is_file():
            if ref is not None:
                require_git(f"{ref_flag} {ref} is read from {path}'s history", UsageError)
                raise UsageError(f"{ref_flag} {ref}: {path} is a plain folder, without git refs")
            return source  # a plain folder renders as it is, without history
    with History(source) as history:
        found = history.commit(ref or history.default_ref())
        if ref is not None and found is None:
            if history.knows_every_commit or not HASH.fullmatch(ref):
                raise UsageError(
                    f"{ref_flag} {ref}: {source.path} has no tag, branch or commit named {ref}"
                )
        if ref is None and found and not source.remote and Path(source.path).is_dir():
            source = Source(source.path, found)
    return source


class History:
    """What a source's git history holds, read without changing anything:
    `with History(source) as h: h.commit("v1.0")`.

    A local repository is read in place, a bundle through a scratch repository, a remote
    through `git ls-remote` (its branch and tag tips only). A remote that does not answer, or
    a local source without history, is a ScaffoldError naming the source."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.remote = source.remote
        self.git_dir: str | None = None
        self.refs: dict[str, str] = {}  # name -> commit, for remotes
        self._scratch: str | None = None

    def __enter__(self) -> "History":
        path = self.source.path
        require_git(f"{path}'s history is read with it")  # every kind of source's history
        if self.remote:
            self.refs = _list_remote_refs(path)
        elif not Path(path).exists():
            raise ScaffoldError(f"template source {path} does not exist")
        elif _is_repository_root(Path(path)):
            self.git_dir = _git("-C", path, "rev-parse", "--absolute-git-dir")
        elif Path(path).is_file():
            self._scratch = tempfile.mkdtemp(prefix="scaffold-history-")
            try:
                self._read_bundle(path)
            except BaseException:  # Ctrl-C included: no scratch repository left behind
                self.__exit__()
                raise
            self.git_dir = self._scratch
        else:
            raise ScaffoldError(
                f"{path} has no git history (not a repository's top folder nor a bundle); "
                "copier needs the template's history to update a project"
            )
        return self

    def _read_bundle(self, path: str) -> None:
        _git("init", "-q", "--bare", self._scratch)
        fetched = subprocess.run(
            ["git", "-C", self._scratch, "fetch", "-q", path, "+refs/*:refs/*"],
            capture_output=True,
            text=True,
        )
        if fetched.returncode != 0:
            raise ScaffoldError(f"{path} is not a readable git bundle: {_first(fetched)}")
        for line in _git("bundle", "list-heads", path).splitlines():
            sha, _, name = line.partition(" ")
            if name == "HEAD":  # the bundle's HEAD, so "HEAD" means what it meant there
                _git("-C", self._scratch, "update-ref", "--no-deref", "HEAD", sha)

    def __exit__(self, *exc) -> None:
        if self._scratch:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    def commit(self, rev: str) -> str | None:
        """The full commit hash `rev` (a tag, branch, HEAD, hash or describe form) names, or
        None when the source does not have it (or, for a remote, when only a fetch could
        tell; see `knows_every_commit`)."""
        if rev.startswith("-"):
            return None  # never an option to git
        if self.git_dir is not None:
            found = _git(
                "--git-dir", self.git_dir, "rev-parse", "-q", "--verify", f"{rev}^{{commit}}"
            )
            if found:
                return found
            described = re.search(r"-g([0-9a-f]{7,40})$", rev)
            return self.commit(described.group(1)) if described else None
        for name in (f"refs/tags/{rev}^{{}}", f"refs/tags/{rev}", f"refs/heads/{rev}", rev):
            if name in self.refs:
                return self.refs[name]
        hashed = re.search(r"(?:^|-g)([0-9a-f]{7,40})$", rev)
        if hashed:
            found = {sha for sha in self.refs.values() if sha.startswith(hashed.group(1))}
            if len(found) == 1:
                return found.pop()
        return None

    @property
    def knows_every_commit(self) -> bool:
        return not self.remote

    def default_ref(self) -> str:
        """What copier renders when given no ref: the latest release tag, else HEAD."""
        from packaging.version import InvalidVersion, Version

        if self.git_dir is not None:
            names = _git("--git-dir", self.git_dir, "tag", "--list").splitlines()
        else:
            names = [n[len("refs/tags/") :] for n in self.refs if n.startswith("refs/tags/")]
        releases = []
        for name in names:
            try:
                version = Version(name)
            except InvalidVersion:
                continue
            if not version.is_prerelease:
                releases.append((version, name))
        return max(releases)[1] if releases else "HEAD"


def _list_remote_refs(url: str) -> dict[str, str]:
    shown = url.removeprefix("git+")  # as the user wrote it: copier_url may have added "git+"
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0")  # never wait for a password
    env.setdefault("GIT_SSH_COMMAND", "ssh -o BatchMode=yes -o ConnectTimeout=15")
    try:
        listed = subprocess.run(
            ["git", "ls-remote", "--", git_url(url)],
            capture_output=True,
            text=True,
            env=env,
            stdin=subprocess.DEVNULL,
            timeout=REMOTE_TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        raise ScaffoldError(f"cannot reach {shown}: no answer in {REMOTE_TIMEOUT} s") from None
    except OSError as err:
        raise ScaffoldError(f"cannot reach {shown}: git cannot run ({err.strerror})") from None
    if listed.returncode != 0:
        raise ScaffoldError(
            f"cannot reach {shown}: {_first(listed)}; check the address and the network, or pass "
            "--template with a local copy of the template"
        )
    refs = {}
    for line in listed.stdout.splitlines():
        sha, _, name = line.partition("\t")
        refs[name] = sha
    return refs


def _is_repository_root(path: Path) -> bool:
    top = _git("-C", str(path), "rev-parse", "--show-toplevel") if path.is_dir() else ""
    return bool(top) and Path(top).resolve() == path.resolve()


def _first(result: subprocess.CompletedProcess) -> str:
    """git's first line of complaint (ssh's, for an ssh URL), without the "fatal: " label."""
    lines = [line.strip() for line in result.stderr.splitlines() if line.strip()]
    return (lines or [f"git exited with {result.returncode}"])[0].removeprefix("fatal: ")


def _git(*args: str) -> str:
    """git's output, or "" when it fails (or is not installed: copier will say so)."""
    try:
        result = subprocess.run(["git", *args], capture_output=True, text=True)
    except OSError:
        return ""
    return result.stdout.strip() if result.returncode == 0 else ""
