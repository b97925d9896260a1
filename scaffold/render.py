"""Render a project with copier into a temporary folder beside DEST, then move it into place.

This is the only module that imports copier (it costs ~0.3 s, which `--help` should not pay).
"""

import filecmp
import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from scaffold.errors import ScaffoldError, UsageError
from scaffold.options import Options

ANSWERS_FILE = ".copier-answers.yml"


@dataclass
class RenderResult:
    dest: Path
    files: list[Path]  # rendered files, relative to dest
    backups: list[Path] = field(default_factory=list)  # user files moved aside by --force


def builtin_template() -> tuple[str, str | None]:
    """scaffold's own template: (source, vcs_ref) for copier.

    A wheel carries it as plain files in scaffold/_template. In a source checkout the
    repository root is the template; copier would render its latest tag, so ask for HEAD.
    """
    here = Path(__file__).resolve().parent
    packaged = here / "_template"
    if (packaged / "copier.yml").is_file():
        return str(packaged), None
    root = here.parent
    if not (root / "copier.yml").is_file():
        raise ScaffoldError(f"scaffold's template is missing (looked in {packaged} and {root})")
    return str(root), "HEAD" if (root / ".git").exists() else None


def render_project(
    dest: str | Path,
    project_name: str,
    package_name: str,
    options: Options,
    *,
    force: bool = False,
    template: str | None = None,
    vcs_ref: str | None = None,
) -> RenderResult:
    """Render the template for `options` into `dest`; on any failure `dest` is left as it was."""
    options.validate()
    dest = Path(dest).absolute()
    if dest.exists() and not dest.is_dir():
        raise UsageError(f"{dest} exists and is not a folder")
    if dest.is_dir() and any(dest.iterdir()) and not force:
        raise UsageError(
            f"{dest} exists and is not empty; --force renders into it, keeping your files"
        )
    if template is None:
        template, vcs_ref = builtin_template()

    data = {
        "project_name": project_name,
        "package_name": package_name,
        **options.answers(),
    }
    dest.parent.mkdir(parents=True, exist_ok=True)
    # Beside DEST, so the final move is a rename on the same filesystem.
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".scaffold", dir=dest.parent))
    try:
        rendered = staging / dest.name
        _run_copier(template, rendered, data, vcs_ref)
        files = sorted(p.relative_to(rendered) for p in rendered.rglob("*") if p.is_file())
        backups = _move_into_place(rendered, dest, files)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return RenderResult(dest, files, backups)


def _run_copier(template: str, out: Path, data: dict, vcs_ref: str | None) -> None:
    import copier
    from copier.errors import CopierError

    try:
        with warnings.catch_warnings():
            # A source checkout with uncommitted edits renders them, and copier warns each time.
            warnings.simplefilter("ignore")
            copier.run_copy(
                template,
                out,
                data=data,
                defaults=True,  # never prompt: an unanswered question would hang or fail
                vcs_ref=vcs_ref,
                settings=copier.Settings(),  # ignore the user's copier defaults file
                quiet=True,
                overwrite=True,
            )
    except (CopierError, ValueError) as err:  # copier reports bad answers as ValueError
        message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ScaffoldError(f"copier could not render the template: {message}") from None


def _move_into_place(rendered: Path, dest: Path, files: list[Path]) -> list[Path]:
    """Move the rendered tree to dest; existing files that would change are kept as *.orig."""
    if not dest.exists() or not any(dest.iterdir()):
        os.replace(rendered, dest)  # one rename: the project appears whole or not at all
        return []
    for rel in files:  # check every path before changing anything
        for parent in [dest / p for p in reversed(rel.parents) if p != Path(".")]:
            if parent.exists() and not parent.is_dir():
                raise UsageError(f"{parent} is a file where the project needs a folder")
        if (dest / rel).is_dir():
            raise UsageError(f"{dest / rel} is a folder where the project needs a file")
    backups = []
    for rel in files:
        target = dest / rel
        if target.exists():
            if filecmp.cmp(target, rendered / rel, shallow=False):
                continue
            backup = _free_name(target.with_name(target.name + ".orig"))
            target.rename(backup)
            backups.append(backup.relative_to(dest))
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(rendered / rel, target)
    return backups


def _free_name(path: Path) -> Path:
    candidate, n = path, 1
    while candidate.exists():
        candidate, n = path.with_name(f"{path.name}{n}"), n + 1
    return candidate
