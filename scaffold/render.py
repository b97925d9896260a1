"""Render a project with copier into a staging folder beside DEST, then move it into place.

This is the only module of `scaffold new` that imports copier (~0.3 s, which `--help` should
not pay). The staging folder is also the claim on DEST: a second `scaffold new` into the same
DEST fails while the first runs, and a run killed with SIGKILL leaves a staging folder that the
next run beside it removes once its owner is gone.
"""

import contextlib
import filecmp
import hashlib
import io
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from scaffold.errors import Interrupted, ScaffoldError, UsageError, first_line
from scaffold.options import OPTIONS, Options, problem_with, project_names
from scaffold.source import Source, builtin_source

ANSWERS_FILE = ".copier-answers.yml"
STAGING_SUFFIX = ".scaffold-new"  # .<hash>.scaffold-new: short, whatever DEST's name is
OWNER_FILE = "owner"  # "pid start-time host" of the run that made a staging folder
ORPHAN_AGE = 60  # seconds after which a staging folder with no owner file is a dead run's


@dataclass
class RenderResult:
    dest: Path
    files: list[Path]  # rendered files, relative to dest
    answers: dict  # as recorded in the project's answers file
    backups: list[Path] = field(default_factory=list)  # user files moved aside by --force
    removed: list[Path] = field(default_factory=list)  # killed runs' staging folders removed


@dataclass
class Created:
    result: RenderResult
    package: str
    uncommitted: bool  # rendered from uncommitted template edits: the project cannot update


def read_answers(project: Path) -> dict:
    """The answers a project was rendered with, as copier recorded them."""
    import yaml  # a dependency of copier

    try:
        return yaml.safe_load((project / ANSWERS_FILE).read_text()) or {}
    except FileNotFoundError:
        raise ScaffoldError(f"{project} has no {ANSWERS_FILE}: not a generated project") from None


def check_known_answers(answers: dict) -> None:
    """scaffold's checks for the answers it knows, for a template that is not its own."""
    context = {**Options().answers(), **answers}
    for name, value in answers.items():
        if name in OPTIONS:
            problem = problem_with(OPTIONS[name], context)
            if problem:
                raise UsageError(f"{OPTIONS[name].flag} {value}: {problem}")


def create_project(
    dest: str,
    answers: Options | dict,
    *,
    template: str | None = None,
    vcs_ref: str | None = None,
    force: bool = False,
    placed: list[Path] | None = None,
) -> Created:
    """`scaffold new` less the asking and the reporting: names from DEST, source, render."""
    from scaffold.source import has_uncommitted_template, user_source

    project_name, package_name = project_names(dest)
    source = builtin_source() if template is None else user_source(template, vcs_ref)
    uncommitted = has_uncommitted_template(source)  # before: once DEST exists, nothing can fail
    result = render_project(
        dest, project_name, package_name, answers, force=force, source=source, placed=placed
    )
    return Created(result, package_name, uncommitted)


def render_project(
    dest: str | Path,
    project_name: str,
    package_name: str,
    options: Options | dict,
    *,
    force: bool = False,
    source: Source | None = None,
    placed: list[Path] | None = None,
) -> RenderResult:
    """Render the template into `dest`; on any failure or Ctrl-C `dest` is left as it was.

    Options are checked here; a plain dict of answers (for another template, whose own
    defaults fill the gaps) gets scaffold's checks for the options scaffold knows. `placed`
    receives DEST in the same uninterruptible step that moves the project there, so a caller's
    Ctrl-C handler knows whether a whole project exists, even after this function returned.
    """
    if isinstance(options, Options):
        options.validate()
        options = options.answers()
    else:
        check_known_answers(options)
    dest = Path(dest).absolute()
    if dest.exists() and not dest.is_dir():
        raise UsageError(f"{dest} exists and is not a folder; choose another DEST")
    source = source or builtin_source()
    data = {"project_name": project_name, "package_name": package_name, **options}
    made = _make_parents(dest.parent)
    moved = False
    try:
        with _claim(dest) as (staging, removed):
            if dest.is_dir() and any(dest.iterdir()) and not force:
                raise UsageError(
                    f"{dest} exists and is not empty; --force renders into it, keeping your files"
                )
            rendered = staging / "project"
            _run_copier(source, rendered, data, staging / "tmp")
            files = sorted(p.relative_to(rendered) for p in rendered.rglob("*") if p.is_file())
            answers = read_answers(rendered)
            with _deferred_interrupts():  # a half-moved project is worse than a late Ctrl-C
                backups = _move_into_place(rendered, dest, files)
                moved = True
                if placed is not None:
                    placed.append(dest)
    except KeyboardInterrupt:
        if moved:  # the Ctrl-C came during the move, and waited for it
            raise Interrupted(f"interrupted; the project in {dest} is complete and kept") from None
        with _deferred_interrupts():
            _remove_empty(made)
        raise Interrupted("interrupted; nothing was written") from None
    except BaseException:
        with _deferred_interrupts():
            _remove_empty(made)
        raise
    return RenderResult(dest, files, answers, backups, removed)


def _run_copier(source: Source, out: Path, data: dict, tmp: Path) -> None:
    import copier
    from copier.errors import CopierError, InvalidConfigFileError

    tmp.mkdir()
    # copier clones the template into the temporary folder; inside the staging folder the
    # clone goes away with it, also when a killed run's staging folder is removed later.
    saved, tempfile.tempdir = tempfile.tempdir, str(tmp)
    # copier prints a broken copier.yml as a block on stderr before raising: held back here,
    # and passed on unless it is that block (the error below says it in one line).
    printed = io.StringIO()
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(printed):
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
    except InvalidConfigFileError as err:  # it names the file in copier's temporary clone
        printed = None
        raise ScaffoldError(
            f"the template's {Path(str(err)).name} ({source.path}) is not valid YAML: "
            f"{_yaml_problem(err.__cause__)}"
        ) from None
    except (CopierError, ValueError) as err:  # copier reports bad answers as ValueError
        raise ScaffoldError(f"copier could not render the template: {first_line(err)}") from None
    except OSError as err:
        raise ScaffoldError(f"cannot render the template: {_os_reason(err)}") from None
    except Exception as err:  # noqa: BLE001 - a --template fork can fail in its own Jinja code
        raise ScaffoldError(
            f"the template failed to render: {type(err).__name__}: {first_line(err)}"
        ) from None
    finally:
        tempfile.tempdir = saved
        if printed is not None and printed.getvalue():
            sys.stderr.write(printed.getvalue())


def _os_reason(err: OSError) -> str:
    """What went wrong, in one line: the system's reason and the file, or for a command copier
    ran (git, whose failures plumbum reports as an OSError without either) its complaint."""
    if err.strerror:
        return f"{err.strerror}: {err.filename}" if err.filename else err.strerror
    said = [line.strip() for line in str(getattr(err, "stderr", "") or "").splitlines()]
    said = [line for line in said if line]
    complaint = next((line for line in said if line.startswith(("fatal:", "error:"))), None)
    if complaint or said:
        command = " ".join(map(str, getattr(err, "argv", None) or ["git"]))
        return f"{command} failed: {complaint or said[0]}"
    return first_line(err)


def _yaml_problem(err: BaseException | None) -> str:
    """A YAML error's problem and where it is, in one line."""
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or (first_line(err) if err else "unreadable")
    return f"{problem} (line {mark.line + 1}, column {mark.column + 1})" if mark else problem


def _make_parents(folder: Path) -> list[Path]:
    """Create `folder` and its missing parents; return those created, deepest first."""
    missing = []
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    made = []
    try:
        for path in reversed(missing):
            path.mkdir()
            made.insert(0, path)
    except OSError as err:
        _remove_empty(made)
        raise UsageError(f"cannot create {path}: {err.strerror}; choose another DEST") from None
    return made


def _remove_empty(folders: list[Path]) -> None:
    for folder in folders:
        with contextlib.suppress(OSError):
            folder.rmdir()


def _owner_id(pid: int) -> str:
    """pid, start time and host: a pid alone may be reused by an unrelated process."""
    return f"{pid} {_start_time(pid)} {socket.gethostname()}"


def _start_time(pid: int) -> str:
    try:  # Linux: field 22 of /proc/PID/stat, after the command name in parentheses
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return "?"


def _owner_alive(owner: str) -> bool:
    pid, started, host = (owner.split() + ["", "", ""])[:3]
    if host != socket.gethostname() or not pid.isdigit():
        return True  # another machine's run (a shared disk): it cannot be checked from here
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's live process
    return started == "?" or _start_time(int(pid)) == started


def remove_stale_staging(parent: Path) -> list[Path]:
    """Remove staging folders that killed `scaffold new` runs left in `parent`.

    Only folders named like scaffold's and holding scaffold's owner file whose process is gone
    (or, without the file, older than a minute: killed right after creating the folder).
    """
    removed = []
    for folder in parent.glob(f".*{STAGING_SUFFIX}"):
        try:
            owner = (folder / OWNER_FILE).read_text()
        except FileNotFoundError:
            try:
                old = time.time() - folder.stat().st_mtime > ORPHAN_AGE
            except OSError:
                continue
            if not old or any(p.name not in ("project", "tmp") for p in folder.iterdir()):
                continue
        except OSError:
            continue
        else:
            if _owner_alive(owner):
                continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


def staging_folder(dest: Path) -> Path:
    """The staging folder of a render into DEST: beside it (so the final move is a rename),
    named after a hash of DEST's name (so two runs into one DEST meet, and the name is short)."""
    digest = hashlib.sha256(dest.name.encode()).hexdigest()[:12]
    return dest.parent / f".{digest}{STAGING_SUFFIX}"


@contextlib.contextmanager
def _claim(dest: Path):
    """Own DEST for the whole render: an exclusively created staging folder beside it."""
    staging = staging_folder(dest)
    removed = remove_stale_staging(dest.parent)
    try:
        staging.mkdir()
    except FileExistsError:
        try:
            owner = (staging / OWNER_FILE).read_text().split()[0]
        except (OSError, IndexError):
            owner = "?"
        raise ScaffoldError(
            f"another scaffold new (pid {owner}) is creating {dest}; wait for it to finish "
            "or choose another DEST"
        ) from None
    except OSError as err:
        raise UsageError(
            f"cannot write in {dest.parent}: {err.strerror}; choose a DEST in a folder you can "
            "write to"
        ) from None
    try:
        (staging / OWNER_FILE).write_text(_owner_id(os.getpid()) + "\n")
        yield staging, removed
    finally:
        with _deferred_interrupts():
            shutil.rmtree(staging, ignore_errors=True)


@contextlib.contextmanager
def _deferred_interrupts():
    """Let a block finish before a Ctrl-C that arrives during it takes effect."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pressed = []
    previous = signal.signal(signal.SIGINT, lambda *_: pressed.append(True))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if pressed:
        raise KeyboardInterrupt


def _move_into_place(rendered: Path, dest: Path, files: list[Path]) -> list[Path]:
    """Move the rendered tree to dest; existing files that would change are kept as *.orig."""
    if not dest.exists() or not any(dest.iterdir()):
        try:
            os.rename(rendered, dest)  # one rename: the project appears whole or not at all
        except OSError as err:
            raise ScaffoldError(f"cannot create {dest}: {err.strerror}") from None
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
