"""The template outside scaffold: plain `copier copy` of the repository, and a wheel install."""

import os
import site
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
import yaml

from scaffold.options import Options
from scaffold.source import Source
from tests.conftest import PYTHON, REPO, render, run

OPTIONS = Options(task="regression", scheduler="plateau", amp=True, clip=True, early_stopping=True)


def venv_sharing_these_packages(venv: Path) -> Path:
    """A new virtual environment that also sees this environment's packages (torch, copier,
    typer), but not its scaffold; returns its python.

    `--system-site-packages` would not do: it shows the *base* interpreter's packages, which
    lack them when the tests run inside a virtual environment, as the README sets them up.
    A .pth file naming these folders adds them after the new environment's own, without
    running their .pth files, so the editable scaffold of this environment stays out.
    """
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    query = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    own = Path(run([str(python), "-c", query], venv).stdout.strip())
    ours = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    ours += site.getsitepackages()
    if site.ENABLE_USER_SITE:
        ours.append(site.getusersitepackages())
    folders = [str(Path(p).resolve()) for p in dict.fromkeys(ours) if Path(p).is_dir()]
    (own / "scaffold_test_parent_packages.pth").write_text("\n".join(folders) + "\n")
    return python


def tree(root: Path) -> dict[str, str]:
    """Every file's text by relative path, the copier answers file and git's folder aside."""
    files = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_file() and rel != ".copier-answers.yml" and ".git" not in path.parts:
            files[rel] = path.read_text()
    return files


def test_plain_copier_copy_renders_the_same_project_as_scaffold_new(tmp_path):
    ours = render(tmp_path / "ours" / "same-name", OPTIONS).dest
    data = {"project_name": "same-name", **OPTIONS.answers()}
    flags = [f"--data={key}={str(value).lower()}" for key, value in data.items()]
    # --vcs-ref=HEAD: the checkout's own version (by default copier takes the latest tag).
    command = ["copier", "copy", "--defaults", "--vcs-ref=HEAD", *flags, str(REPO)]
    theirs = tmp_path / "theirs" / "same-name"
    result = run([*command, str(theirs)], tmp_path, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    assert tree(ours) == tree(theirs)
    answers = yaml.safe_load((theirs / ".copier-answers.yml").read_text())
    assert answers["_src_path"] == str(REPO) and answers["patience"] == 5


def test_plain_copier_refuses_bad_patience(tmp_path):
    data = ["-d", "project_name=x", "-d", "scheduler=plateau", "-d", "early_stopping=true"]
    data += ["-d", "patience=2"]
    command = [
        "copier",
        "copy",
        "--defaults",
        "--vcs-ref=HEAD",
        *data,
        str(REPO),
        str(tmp_path / "x"),
    ]
    result = run(command, tmp_path, stdin=subprocess.DEVNULL)
    assert result.returncode != 0
    assert "must be larger than the plateau patience (2)" in result.stderr
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
def test_wheel_carries_the_template_and_renders_from_anywhere(tmp_path):
    # Built from a clone: the wheel's bundle holds committed history, so compare like with like.
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    dist = tmp_path / "dist"
    build = run([PYTHON, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist)], clone)
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = dist.glob("scaffold-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "scaffold/_template/copier.yml" in names
    assert "scaffold/_template/template/src/{{package_name}}/engine.py.jinja" in names
    assert "scaffold/_template/template.bundle" in names  # the history `scaffold update` needs

    # A fresh environment; torch, copier and typer come from this one, scaffold from the wheel.
    venv = tmp_path / "venv"
    venv_sharing_these_packages(venv)
    bin_dir = venv / "bin"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    install = run(
        [str(bin_dir / "python"), "-m", "pip", "install", "--no-deps", "--no-index", str(wheel)],
        tmp_path,
        env=env,
    )
    assert install.returncode == 0, install.stderr
    where = run(
        [str(bin_dir / "python"), "-c", "import scaffold; print(scaffold.__file__)"],
        tmp_path,
        env=env,
    )
    assert where.stdout.startswith(str(venv)), where.stdout

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    args = [
        "new",
        "from-wheel",
        "-y",
        "--no-smoke",
        "--task",
        "regression",
        "--scheduler",
        "plateau",
    ]
    args += ["--amp", "--clip", "--early-stopping"]
    result = run([str(bin_dir / "scaffold"), *args], elsewhere, env=env)
    assert result.returncode == 0, result.stderr
    project = elsewhere / "from-wheel"
    # pip byte-compiles the template's .py files; none of that may reach a project.
    assert not [p for p in project.rglob("*") if "__pycache__" in p.parts or p.suffix == ".pyc"]
    from_clone = render(tmp_path / "src" / "from-wheel", OPTIONS, source=Source(str(clone), "HEAD"))
    assert tree(project) == tree(from_clone.dest)
