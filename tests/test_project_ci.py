"""Projects that live in git from the first minute: the repository `scaffold new` makes, and the
CI workflow and pre-commit hooks every project carries."""

import os
import shlex
import shutil
import subprocess

import copier  # noqa: F401 - see below
import pytest
import yaml
from packaging.requirements import Requirement
from typer.testing import CliRunner

from scaffold import cli, git_init
from scaffold.options import Options
from scaffold.source import Source
from tests.conftest import COVERING, PYTHON, REPO, TASKS, combo_id, project_env, render, run
from tests.test_update import isolate_git_and_home, make_template_repo, update

# copier's plumbum copies the environment once, when first imported: imported above, it keeps
# the real PATH, and the tests below that change PATH cannot break copier in later tests.
runner = CliRunner()
WORKFLOW = ".github/workflows/ci.yml"
PRE_COMMIT = ".pre-commit-config.yaml"
# What the workflow runs, in order: the CPU build of torch before the project, so that pip keeps
# it, then the project's own checks.
INSTALLS = [
    "pip install torch --index-url https://download.pytorch.org/whl/cpu",
    'pip install -e ".[dev]"',
]
CHECKS = [
    "ruff check .",
    "ruff format --check .",
    "python -m pytest -q",
    "python -m pytest -q -m probe",
]
# One option set per task from the covering set: every task's project, and several switches.
ONE_PER_TASK = [next(o for o in COVERING if o.task == task) for task in TASKS]


def git(cwd, *args: str) -> str:
    result = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True)
    return result.stdout.strip()


def new(dest, *args: str):
    return runner.invoke(cli.app, ["new", str(dest), "-y", *args])


@pytest.fixture
def plain_template(tmp_path):
    """scaffold's template as a plain folder: copier needs no git to read it."""
    folder = tmp_path / "template-folder"
    folder.mkdir()
    shutil.copy(REPO / "copier.yml", folder)
    shutil.copytree(REPO / "template", folder / "template")
    return folder


@pytest.fixture
def no_git_identity(monkeypatch, tmp_path):
    """A user whose git knows nobody: no global or system config, no identity variables."""
    home = tmp_path / "empty-home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for name in (
        "XDG_CONFIG_HOME",
        "GIT_CONFIG_GLOBAL",
        "GIT_CONFIG_COUNT",
        "EMAIL",
        "GIT_AUTHOR_NAME",
        "GIT_AUTHOR_EMAIL",
        "GIT_COMMITTER_NAME",
        "GIT_COMMITTER_EMAIL",
    ):
        monkeypatch.delenv(name, raising=False)
    return home


def extras(project) -> dict[str, list[str]]:
    """The project's optional dependencies: each extra and its requirements."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    pyproject = tomllib.loads((project / "pyproject.toml").read_text())
    return pyproject["project"]["optional-dependencies"]


def dev_requirements(project) -> list[str]:
    return extras(project)["dev"]


def workflow_steps(project) -> list[dict]:
    workflow = yaml.safe_load((project / WORKFLOW).read_text())
    # YAML 1.1 reads the key `on` as True.
    assert set(workflow[True]) >= {"push", "pull_request"}
    (job,) = workflow["jobs"].values()
    assert job["runs-on"] == "ubuntu-latest"
    return job["steps"]


def workflow_commands(project) -> list[str]:
    return [step["run"] for step in workflow_steps(project) if "run" in step]


# --- the workflow and the hooks ---------------------------------------------------------------


@pytest.mark.parametrize("options", ONE_PER_TASK, ids=combo_id)
def test_workflow_sets_up_python_with_a_pip_cache_then_runs_the_checks_in_order(tmp_path, options):
    project = render(tmp_path / "proj", options).dest
    steps = workflow_steps(project)
    assert steps[0]["uses"].startswith("actions/checkout@v")
    assert steps[1]["uses"].startswith("actions/setup-python@v")
    setup = steps[1]["with"]
    # A string: unquoted, YAML would read 3.10 as the number 3.1.
    assert setup["python-version"] == "3.11"
    assert setup["cache"] == "pip" and (project / setup["cache-dependency-path"]).is_file()
    assert [step["run"] for step in steps[2:]] == INSTALLS + CHECKS
    assert all(step.get("name") for step in steps[2:])  # each step reads well in the Actions log


@pytest.mark.parametrize("options", ONE_PER_TASK, ids=combo_id)
def test_pre_commit_runs_ruff_check_with_fixes_then_ruff_format(tmp_path, options):
    project = render(tmp_path / "proj", options).dest
    (repo,) = yaml.safe_load((project / PRE_COMMIT).read_text())["repos"]
    assert repo["repo"] == "https://github.com/astral-sh/ruff-pre-commit"
    assert [hook["id"] for hook in repo["hooks"]] == ["ruff-check", "ruff-format"]
    assert repo["hooks"][0]["args"] == ["--fix"]
    # The pinned ruff is one the project's dev extra allows: the hooks and CI agree on rules.
    (ruff,) = [Requirement(r) for r in dev_requirements(project) if r.startswith("ruff")]
    assert repo["rev"].startswith("v") and ruff.specifier.contains(repo["rev"][1:])


@pytest.mark.parametrize("options", ONE_PER_TASK, ids=combo_id)
def test_the_dev_extra_the_workflow_installs_holds_every_extra_the_tests_use(tmp_path, options):
    # The probes export to ONNX, read TensorBoard's events, draw curves, log to MLflow and run
    # sweeps; a package missing from .[dev] would leave CI with skipped tests, or failing ones.
    optional = extras(render(tmp_path / "proj", options).dest)
    assert set(optional) == {"tensorboard", "plot", "export", "tune", "mlflow", "dev"}
    dev = {Requirement(r).name for r in optional["dev"]}
    for name, requirements in optional.items():
        assert {Requirement(r).name for r in requirements} <= dev, name
    assert {"mlflow-skinny", "sqlalchemy", "alembic", "optuna"} <= dev and "mlflow" not in dev


@pytest.mark.parametrize("options", ONE_PER_TASK, ids=combo_id)
def test_a_generated_project_passes_the_workflows_own_commands(tmp_path, options):
    """The commands come from the rendered workflow file, so the test and CI cannot drift."""
    project = render(tmp_path / "proj", options).dest
    commands = workflow_commands(project)
    assert commands[: len(INSTALLS)] == INSTALLS  # this environment already has both
    collected = []
    for command in commands[len(INSTALLS) :]:
        program, *args = shlex.split(command)
        if program == "ruff":
            argv = [PYTHON, "-m", "ruff", *args]
        elif program == "python" and args[:2] == ["-m", "pytest"]:
            # Collecting is enough here: the generated suites run in test_generated_projects.
            argv = [PYTHON, *args, "--collect-only", "-p", "no:cacheprovider"]
        else:
            pytest.fail(f"the workflow runs {command!r}, which this test does not know")
        result = run(argv, project, env=project_env())
        assert result.returncode == 0, f"{command}\n{result.stdout[-3000:]}{result.stderr[-3000:]}"
        if program == "python":
            collected.append({line for line in result.stdout.splitlines() if "::" in line})
    # The two tiers: each holds tests, and together they are every test once.
    everything = [PYTHON, "-m", "pytest", "-q", "-m", "probe or not probe", "--collect-only"]
    result = run([*everything, "-p", "no:cacheprovider"], project, env=project_env())
    assert result.returncode == 0, result.stdout[-3000:]
    default, probes = collected
    assert default and probes and not default & probes
    assert default | probes == {line for line in result.stdout.splitlines() if "::" in line}


# --- the repository scaffold new makes -------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("task", TASKS)
def test_new_commits_every_rendered_file_and_the_smoke_check_leaves_the_tree_clean(
    tmp_path, plain_template, task
):
    dest = tmp_path / "proj"
    result = new(dest, "--task", task, "--smoke", "--template", str(plain_template))
    assert result.exit_code == 0, result.output
    assert "smoke check passed" in result.output
    # The same template folder: other edits to the checkout's template may land meanwhile.
    source = Source(str(plain_template), None)
    rendered = render(tmp_path / "reference" / "proj", Options(task=task), source=source).files
    assert git(dest, "ls-tree", "-r", "--name-only", "HEAD").splitlines() == sorted(
        p.as_posix() for p in rendered
    )
    assert {WORKFLOW, PRE_COMMIT} <= {p.as_posix() for p in rendered}
    assert git(dest, "rev-list", "--count", "HEAD") == "1"
    assert git(dest, "status", "--porcelain", "--untracked-files=all") == ""
    commit, branch = (
        git(dest, "rev-parse", "--short", "HEAD"),
        git(dest, "branch", "--show-current"),
    )
    assert (
        f"  git repository made: first commit {commit} on {branch}; scaffold update works from here"
    ) in result.output.splitlines()
    assert git(dest, "log", "-1", "--format=%s").startswith("Generated by scaffold ")


def test_a_project_from_uncommitted_template_edits_is_committed_without_promising_updates(
    tmp_path, plain_template, monkeypatch
):
    monkeypatch.setattr("scaffold.source.has_uncommitted_template", lambda source: True)
    result = new(tmp_path / "proj", "--no-smoke", "--template", str(plain_template))
    assert result.exit_code == 0, result.output
    assert "scaffold update will not work for it" in result.output  # the warning says why
    assert "  git repository made: first commit " in result.output
    assert "scaffold update works from here" not in result.output


def test_no_git_makes_no_repository_and_says_so(tmp_path, plain_template):
    dest = tmp_path / "proj"
    result = new(dest, "--no-smoke", "--no-git", "--template", str(plain_template))
    assert result.exit_code == 0, result.output
    assert not (dest / ".git").exists() and (dest / WORKFLOW).is_file()
    assert "  no git repository (--no-git); scaffold update needs one: " in result.output


def test_dest_inside_a_repository_makes_none_and_says_so(tmp_path, plain_template):
    outer = tmp_path / "outer"
    outer.mkdir()
    git(outer, "init", "-q")
    dest = outer / "sub" / "proj"
    result = new(dest, "--no-smoke", "--template", str(plain_template))
    assert result.exit_code == 0, result.output
    assert not (dest / ".git").exists()
    assert (
        f"  no git repository made: {dest} is inside the git work tree {outer}; commit it there"
    ) in result.output.splitlines()
    assert git(outer, "rev-list", "--all") == ""  # the user's repository is not touched


def test_dest_ignored_by_the_enclosing_repository_gets_its_own(tmp_path, plain_template):
    # scaffold's own README renders demo/ inside the checkout, which ignores it: the demo gets
    # a repository of its own (so scaffold update works there) and the outer one is untouched.
    outer = tmp_path / "outer"
    outer.mkdir()
    git(outer, "init", "-q")
    (outer / ".gitignore").write_text("/scratch/\n")
    dest = outer / "scratch" / "proj"
    result = new(dest, "--no-smoke", "--template", str(plain_template))
    assert result.exit_code == 0, result.output
    assert "  git repository made: first commit " in result.output
    assert git(dest, "rev-parse", "--show-toplevel") == str(dest)
    assert git(dest, "status", "--porcelain") == ""
    assert git(outer, "status", "--porcelain") == "?? .gitignore"  # the project stays ignored
    # A folder it does not ignore is still the user's to commit.
    other = outer / "kept" / "proj"
    result = new(other, "--no-smoke", "--template", str(plain_template))
    assert not (other / ".git").exists(), result.output


def test_next_steps_install_into_this_environment_when_it_has_torch(monkeypatch):
    import sys

    from scaffold import new_project

    monkeypatch.setattr(sys, "base_prefix", sys.prefix + "-base")  # running in a venv
    here = '  pip install -e ".[dev]"   # into this environment, which has torch\n'
    assert new_project._install_lines() == here  # this venv has torch
    monkeypatch.setattr(sys, "base_prefix", sys.prefix)  # not a venv: one of its own
    lines = new_project._install_lines()
    assert (
        "python -m venv .venv" in lines
        and "--index-url" in lines
        and lines.endswith('pip install -e ".[dev]"\n')
    )


def test_without_git_on_path_makes_none_and_says_so(tmp_path, plain_template, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "no-programs"))
    dest = tmp_path / "proj"
    result = new(dest, "--no-smoke", "--template", str(plain_template))
    assert result.exit_code == 0, result.output
    assert not (dest / ".git").exists() and (dest / "pyproject.toml").is_file()
    lines = result.output.splitlines()
    assert "  no git repository made: git is not on PATH" in lines
    assert any(
        line.startswith("  scaffold update needs one; once git is installed: cd ") for line in lines
    )


@pytest.mark.parametrize("configured", [{}, {"user.name": "Ada"}], ids=["nothing", "name-only"])
def test_without_a_git_identity_the_commit_is_still_made_and_said(
    tmp_path, plain_template, no_git_identity, configured
):
    for key, value in configured.items():
        git(tmp_path, "config", "--global", key, value)
    global_config = (no_git_identity / ".gitconfig").read_bytes() if configured else None
    dest = tmp_path / "proj"
    result = new(dest, "--no-smoke", "--template", str(plain_template))
    assert result.exit_code == 0, result.output
    assert git(dest, "rev-list", "--count", "HEAD") == "1"
    name = configured.get("user.name", "scaffold")
    assert git(dest, "log", "-1", "--format=%an <%ae>|%cn <%ce>") == (
        f"{name} <scaffold@localhost>|{name} <scaffold@localhost>"
    )
    unset = "user.email" if configured else "user.name and user.email"
    assert f"  your git has no {unset}: committed with " in result.output
    # The user's git config is left as it was (none stays none).
    if global_config is None:
        assert list(no_git_identity.iterdir()) == []
    else:
        assert (no_git_identity / ".gitconfig").read_bytes() == global_config
    assert "[user]" not in (dest / ".git" / "config").read_text()


def test_a_configured_identity_is_used_as_it_is(tmp_path, plain_template, no_git_identity):
    git(tmp_path, "config", "--global", "user.name", "Ada")
    git(tmp_path, "config", "--global", "user.email", "ada@example.com")
    dest = tmp_path / "proj"
    result = new(dest, "--no-smoke", "--template", str(plain_template))
    assert result.exit_code == 0, result.output
    assert git(dest, "log", "-1", "--format=%an <%ae>") == "Ada <ada@example.com>"
    assert "your git has no" not in result.output


@pytest.fixture
def failing_git_commit(tmp_path, monkeypatch):
    """A git whose commit fails, as a full disk or a broken signing key would make it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "git"
    fake.write_text(
        "#!/bin/sh\n"
        'for arg in "$@"; do\n'
        '  if [ "$arg" = commit ]; then echo "fatal: cannot write the commit" >&2; exit 128; fi\n'
        "done\n"
        f'exec {shutil.which("git")} "$@"\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


@pytest.mark.parametrize("quiet", [False, True], ids=["summary", "quiet"])
def test_a_git_failure_is_one_warning_and_the_project_is_kept(
    tmp_path, plain_template, failing_git_commit, quiet
):
    dest = tmp_path / "proj"
    result = new(dest, "--no-smoke", "--template", str(plain_template), *(["-q"] * quiet))
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.output.splitlines() if line.startswith("warning: ")]
    assert warnings == [
        "warning: no git repository made (git commit failed: fatal: cannot write the commit); "
        f"the project is complete; make one with: cd {dest} && git init && git add -A && "
        "git commit -m 'Generated project'"
    ]
    if quiet:
        assert result.output.splitlines() == warnings
    assert not (dest / ".git").exists()  # no half-made repository
    assert (dest / WORKFLOW).is_file() and (dest / "pyproject.toml").is_file()


def test_ctrl_c_during_git_keeps_the_project_without_a_half_made_repository(
    tmp_path, plain_template, monkeypatch
):
    real_run = subprocess.run

    def interrupted(command, **kwargs):
        if command[0] == "git" and "commit" in command:
            raise KeyboardInterrupt
        return real_run(command, **kwargs)

    monkeypatch.setattr(git_init.subprocess, "run", interrupted)
    dest = tmp_path / "proj"
    result = new(dest, "--no-smoke", "-q", "--template", str(plain_template))
    assert result.exit_code == 130
    assert result.output == f"interrupted; the project in {dest} is complete and kept\n"
    assert not (dest / ".git").exists() and (dest / "pyproject.toml").is_file()


def test_force_commits_only_the_rendered_files_and_names_the_others(tmp_path, plain_template):
    dest = tmp_path / "mine"
    (dest / "data").mkdir(parents=True)
    (dest / "data" / "table.csv").write_text("a,target\n1,0\n")
    (dest / "README.md").write_text("my notes\n")
    result = new(dest, "--no-smoke", "--force", "--template", str(plain_template))
    assert result.exit_code == 0, result.output
    committed = git(dest, "ls-tree", "-r", "--name-only", "HEAD").splitlines()
    assert "README.md" in committed and "README.md.orig" not in committed
    assert "data/table.csv" not in committed
    assert (
        "  left out of the commit, as they were in DEST before: README.md.orig, data/table.csv; "
        "commit or ignore them before scaffold update"
    ) in result.output.splitlines()


def test_scaffold_update_works_right_after_scaffold_new(tmp_path, monkeypatch):
    isolate_git_and_home(monkeypatch, tmp_path)
    template_repo = make_template_repo(tmp_path)
    dest = tmp_path / "proj"
    made = new(dest, "--no-smoke", "--template", str(template_repo))
    assert made.exit_code == 0, made.output
    # No git command in between: the repository scaffold made is what update needs.
    unchanged = update(dest)
    assert unchanged.exit_code == 0, unchanged.output
    assert "Nothing changed." in unchanged.output
    switched = update(dest, "--set", "amp=true")
    assert switched.exit_code == 0, switched.output
    assert "file(s) changed" in switched.output
    assert git(dest, "rev-list", "--count", "HEAD") == "1"  # the user reviews and commits


def test_help_names_the_git_flag_and_what_it_does():
    text = " ".join(runner.invoke(cli.app, ["new", "--help"]).output.split())
    assert "--git / --no-git" in text
    assert "Make DEST a git repository with a first commit of the project" in text
