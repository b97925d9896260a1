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

from scaffold.errors import ScaffoldError, UsageError, first_line
from scaffold.options import Options
from scaffold.source import Source, builtin_source

ANSWERS_FILE = ".copier-answers.yml"


@dataclass
class RenderResult:
    dest: Path
    files: list[Path]  # rendered files, relative to dest
    answers: dict  # as recorded in the project's answers file
    backups: list[Path] = field(default_factory=list)  # user files moved aside by --force


def read_answers(project: Path) -> dict:
    """The answers a project was rendered with, as copier recorded them."""
    import yaml  # a dependency of copier

    try:
        return yaml.safe_load((project / ANSWERS_FILE).read_text()) or {}
    except FileNotFoundError:
        raise ScaffoldError(f"{project} has no {ANSWERS_FILE}: not a generated project") from None


def render_project(
    dest: str | Path,
    project_name: str,
    package_name: str,
    options: Options | dict,
    *,
    force: bool = False,
    source: Source | None = None,
) -> RenderResult:
    """Render the template into `dest`; on any failure `dest` is left as it was.

    Options are checked here; a plain dict of answers (for another template, whose own
    defaults fill the gaps) is left to that template's validators.
    """
    if isinstance(options, Options):
        options.validate()
        options = options.answers()
    dest = Path(dest).absolute()
    if dest.exists() and not dest.is_dir():
        raise UsageError(f"{dest} exists and is not a folder")
    if dest.is_dir() and any(dest.iterdir()) and not force:
        raise UsageError(
            f"{dest} exists and is not empty; --force renders into it, keeping your files"
        )
    source = source or builtin_source()
    data = {"project_name": project_name, "package_name": package_name, **options}
    dest.parent.mkdir(parents=True, exist_ok=True)
    # Beside DEST, so the final move is a rename on the same filesystem.
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".scaffold", dir=dest.parent))
    try:
        rendered = staging / dest.name
        _run_copier(source, rendered, data)
        files = sorted(p.relative_to(rendered) for p in rendered.rglob("*") if p.is_file())
        answers = read_answers(rendered)
        backups = _move_into_place(rendered, dest, files)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return RenderResult(dest, files, answers, backups)


def _run_copier(source: Source, out: Path, data: dict) -> None:
    import copier
    from copier.errors import CopierError

    try:
        with warnings.catch_warnings():
            # A source checkout with uncommitted edits renders them, and copier warns each time.
            warnings.simplefilter("ignore")
            copier.run_copy(
                source.path,
                out,
                data=data,
                defaults=True,  # never prompt: an unanswered question would hang or fail
                vcs_ref=source.ref,
                settings=copier.Settings(),  # ignore the user's copier defaults file
                quiet=True,
                overwrite=True,
            )
    except (CopierError, ValueError) as err:  # copier reports bad answers as ValueError
        raise ScaffoldError(f"copier could not render the template: {first_line(err)}") from None


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
