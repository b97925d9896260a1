"""Where the template comes from: a git checkout, the wheel's bundle, or a source the user names.

Projects record the source in their answers file, and `copier update` re-renders the old
version from it, so the recorded path must outlive scaffold's virtual environment. A wheel's
bundle is therefore copied to a per-user folder (SCAFFOLD_HOME, default
~/.local/share/scaffold) and projects point there; each scaffold version refreshes that copy
only when its own history is longer, so older commits stay reachable.
"""

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from scaffold.errors import ScaffoldError

PACKAGED = Path(__file__).resolve().parent / "_template"
CHECKOUT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Source:
    path: str  # what copier reads: a folder, a git repository, a bundle file or a URL
    ref: str | None  # the git ref to render, None for copier's default (latest tag, or HEAD)

    def describe(self) -> str:
        return self.path if self.ref is None else f"{self.path} @ {self.ref}"


def scaffold_home() -> Path:
    """Per-user data folder that outlives any virtual environment."""
    if os.environ.get("SCAFFOLD_HOME"):
        return Path(os.environ["SCAFFOLD_HOME"]).expanduser().absolute()
    import platformdirs  # a dependency of copier

    return Path(platformdirs.user_data_dir("scaffold"))


def builtin_source() -> Source:
    """scaffold's own template, as updatable as the installation allows."""
    if (PACKAGED / "template.bundle").is_file():
        meta = json.loads((PACKAGED / "bundle.json").read_text())
        return Source(str(install_bundle()), meta["commit"])
    if (PACKAGED / "copier.yml").is_file():  # a wheel built without history (from an sdist)
        return Source(str(PACKAGED), None)
    if (CHECKOUT / "copier.yml").is_file():
        # A source checkout: HEAD, uncommitted template edits included; by default copier
        # would take the latest tag instead.
        return Source(str(CHECKOUT), "HEAD" if (CHECKOUT / ".git").exists() else None)
    raise ScaffoldError(f"scaffold's template is missing (looked in {PACKAGED} and {CHECKOUT})")


def has_uncommitted_template(source: Source) -> bool:
    """A checkout whose template has uncommitted edits: copier renders them, but records a
    commit that exists only in its temporary clone, so the project cannot be updated later."""
    path = Path(source.path)
    if source.ref != "HEAD" or not (path / ".git").exists():
        return False
    return bool(_git("-C", str(path), "status", "--porcelain", "--", "copier.yml", "template"))


def install_bundle() -> Path:
    """Copy the wheel's bundle to SCAFFOLD_HOME unless a longer history is already there."""
    home = scaffold_home()
    bundle, meta_file = home / "template.bundle", home / "bundle.json"
    ours = json.loads((PACKAGED / "bundle.json").read_text())
    try:
        theirs = json.loads(meta_file.read_text())
    except (OSError, ValueError):
        theirs = None
    if theirs is None or not bundle.is_file() or theirs["commits"] < ours["commits"]:
        home.mkdir(parents=True, exist_ok=True)
        # Copy beside, then rename: a reader never sees half a bundle.
        shutil.copyfile(PACKAGED / "template.bundle", home / ".template.bundle.tmp")
        os.replace(home / ".template.bundle.tmp", bundle)
        meta_file.write_text(json.dumps(ours) + "\n")
    return bundle


def user_source(path: str, ref: str | None) -> Source:
    """A template the user names: a local path (recorded absolute, so updates work from
    anywhere) or a git URL."""
    local = Path(path).expanduser()
    if local.exists():
        return Source(str(local.absolute()), ref)
    if "://" in path or path.startswith("git@") or path.startswith("gh:") or path.startswith("gl:"):
        return Source(path, ref)
    raise ScaffoldError(f"template source not found: {path}")


def resolve_commit(source: Source) -> str | None:
    """The full commit hash `source.ref` names, or None when it cannot be known offline."""
    path = Path(source.path)
    if not path.exists():
        return None
    ref = source.ref or "HEAD"
    if path.is_file():  # a bundle: list its refs without cloning
        heads = _git("bundle", "list-heads", str(path))
        if len(ref) == 40:
            return ref
        for line in heads.splitlines():
            sha, name = line.split(maxsplit=1)
            if name in (ref, f"refs/heads/{ref}", f"refs/tags/{ref}"):
                return sha
        return None
    if (path / ".git").exists():
        return _git("-C", str(path), "rev-parse", f"{ref}^{{commit}}") or None
    return None


def _git(*args: str) -> str:
    result = subprocess.run(["git", *args], capture_output=True, text=True)
    return result.stdout.strip() if result.returncode == 0 else ""
