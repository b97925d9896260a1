"""Keeping generated projects up to date: scaffold update, plain copier update, teams' templates.

Real git and real copier throughout: template repositories are built in tmp_path.
"""

import os
import shutil
import subprocess

import pytest
import yaml
from typer.testing import CliRunner

from scaffold import cli
from tests.conftest import PYTHON, REPO, project_env, run
from tests.test_copier_and_wheel import venv_sharing_these_packages

runner = CliRunner()
ENGINE = "template/src/{{package_name}}/engine.py.jinja"
OLD_LINE = "# R2: drop the last step's gradients before backward"
NEW_LINE = "# R2: clear the previous step's gradients before this backward pass"


def isolate_git_and_home(monkeypatch, tmp_path) -> None:
    """A git identity for commits, and scaffold's per-user folder inside tmp_path."""
    for key in ("GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME"):
        monkeypatch.setenv(key, "Test")
    for key in ("GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL"):
        monkeypatch.setenv(key, "test@example.com")
    monkeypatch.setenv("SCAFFOLD_HOME", str(tmp_path / "scaffold-home"))


@pytest.fixture(autouse=True)
def git_identity(monkeypatch, tmp_path):
    isolate_git_and_home(monkeypatch, tmp_path)


def git(cwd, *args) -> str:
    result = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True)
    return result.stdout.strip()


def commit_all(cwd, message="change") -> None:
    git(cwd, "add", "-A")
    git(cwd, "commit", "-q", "-m", message)


def make_template_repo(where):
    """A git repository holding this checkout's template as version A."""
    repo = where / "template-repo"
    repo.mkdir()
    shutil.copy(REPO / "copier.yml", repo)
    shutil.copytree(REPO / "template", repo / "template")
    git(repo, "init", "-q", "-b", "main")
    commit_all(repo, "version A")
    return repo


@pytest.fixture
def template_repo(tmp_path):
    return make_template_repo(tmp_path)


def release_version_b(repo) -> None:
    """Version B: a changed line in the loop and a new file."""
    engine = repo / ENGINE
    engine.write_text(engine.read_text().replace(OLD_LINE, NEW_LINE))
    (repo / "template" / "CHANGELOG.md").write_text("# Changes\n\n- B: clearer comments\n")
    commit_all(repo, "version B")


def new_project(tmp_path, repo, *args, name="proj"):
    result = runner.invoke(
        cli.app, ["new", str(tmp_path / name), "-y", "--no-smoke", "--template", str(repo), *args]
    )
    assert result.exit_code == 0, result.output
    assert "  git repository made: first commit " in result.output  # update needs nothing more
    return tmp_path / name


def make_user_edits(project) -> None:
    """A new activation in the model, a new module, a changed default."""
    package = project / "src" / project.name
    model = package / "model.py"
    model.write_text(model.read_text().replace("nn.ReLU()", "nn.GELU()"))
    (package / "features.py").write_text('"""My feature engineering."""\n\nSCALE = 2.0\n')
    config = package / "config.py"
    config.write_text(config.read_text().replace("epochs: int = 20", "epochs: int = 30"))
    commit_all(project, "my edits")


def assert_user_edits_kept(project) -> None:
    package = project / "src" / project.name
    assert "nn.GELU()" in (package / "model.py").read_text()
    assert (package / "features.py").read_text().startswith('"""My feature engineering."""')
    assert "epochs: int = 30" in (package / "config.py").read_text()


def answers(project) -> dict:
    return yaml.safe_load((project / ".copier-answers.yml").read_text())


def update(project, *args):
    return runner.invoke(cli.app, ["update", str(project), *args])


def project_tests_pass(project) -> None:
    result = run(
        [PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x"], project, env=project_env()
    )
    assert result.returncode == 0, result.stdout[-3000:]


@pytest.mark.slow
def test_update_keeps_edits_and_applies_the_new_version(tmp_path, template_repo):
    project = new_project(tmp_path, template_repo)
    make_user_edits(project)
    before = answers(project)["_commit"]
    release_version_b(template_repo)

    check = update(project, "--check")
    assert check.exit_code == 0 and "a newer template is available" in check.output
    result = update(project)
    assert result.exit_code == 0, result.output
    assert f"template {before}" in result.output and "->" in result.output
    assert_user_edits_kept(project)
    assert NEW_LINE in (project / "src" / "proj" / "engine.py").read_text()
    assert (project / "CHANGELOG.md").is_file()
    assert answers(project)["_commit"] != before
    assert update(project, "--check").output.startswith("up to date")
    commit_all(project, "update to B")
    project_tests_pass(project)


def test_conflicting_edit_is_listed_and_kept_inline(tmp_path, template_repo):
    project = new_project(tmp_path, template_repo)
    engine = project / "src" / "proj" / "engine.py"
    engine.write_text(engine.read_text().replace(OLD_LINE, "# R2: my own words about zero_grad"))
    commit_all(project, "my comment")
    release_version_b(template_repo)

    result = update(project)
    assert result.exit_code == 1
    assert "src/proj/engine.py" in result.output
    assert "Resolve them, run python -m pytest -q" in result.output
    text = engine.read_text()
    assert "<<<<<<< before updating" in text and ">>>>>>> after updating" in text
    assert "my own words about zero_grad" in text and NEW_LINE in text


@pytest.mark.slow
def test_options_switched_on_later_keep_edits(tmp_path, template_repo):
    project = new_project(tmp_path, template_repo)
    make_user_edits(project)
    package = project / "src" / "proj"
    for setting in ("amp=true", "early_stopping=true", "scheduler=plateau"):
        result = update(project, "--set", setting)
        assert result.exit_code == 0, result.output
        commit_all(project, f"scaffold update --set {setting}")
    got = answers(project)
    assert (got["amp"], got["early_stopping"], got["scheduler"]) == (True, True, "plateau")
    assert "torch.autocast" in (package / "engine.py").read_text()
    assert "ReduceLROnPlateau" in (package / "optim.py").read_text()
    assert "epochs_without_improvement" in (package / "train.py").read_text()
    assert "R13" in (project / "tests" / "test_contract_epochs.py").read_text()
    assert_user_edits_kept(project)
    project_tests_pass(project)


def test_dirty_or_untracked_tree_is_refused_and_nothing_changes(tmp_path, template_repo):
    project = new_project(tmp_path, template_repo)
    release_version_b(template_repo)
    model = project / "src" / "proj" / "model.py"
    model.write_text(model.read_text() + "# unsaved thought\n")
    (project / "scratch.txt").write_text("notes")
    status = git(project, "status", "--porcelain")
    snapshot = {
        p: p.read_bytes() for p in project.rglob("*") if p.is_file() and ".git" not in p.parts
    }

    result = update(project, "--set", "amp=true")
    assert result.exit_code == 1
    assert result.output.startswith("error: uncommitted changes in ")
    assert "src/proj/model.py" in result.output and "scratch.txt" in result.output
    assert git(project, "status", "--porcelain") == status
    after = {p: p.read_bytes() for p in project.rglob("*") if p.is_file() and ".git" not in p.parts}
    assert after == snapshot


def test_project_outside_git_is_refused(tmp_path, template_repo):
    result = runner.invoke(
        cli.app, ["new", str(tmp_path / "loose"), "-y", "--no-smoke", "--no-git"]
    )
    assert result.exit_code == 0
    refused = update(tmp_path / "loose")
    assert refused.exit_code == 1 and "is not in a git repository" in refused.output


@pytest.mark.parametrize(
    "setting, message",
    [
        ("colour=blue", "KEY one of: task, scheduler, plateau_patience, amp, clip"),
        ("amp=maybe", "--set amp: expected true or false, not 'maybe'"),
        ("patience=soon", "--set patience: expected a number"),
        ("scheduler=linear", "--set scheduler=linear: must be one of cosine, plateau"),
        ("amp", "expected KEY=VALUE"),
    ],
)
def test_bad_set_lists_what_is_valid_and_changes_nothing(tmp_path, template_repo, setting, message):
    project = new_project(tmp_path, template_repo)
    head = git(project, "rev-parse", "HEAD")
    result = update(project, "--set", setting)
    assert result.exit_code == 2, result.output
    assert message in result.output and len(result.output.strip().splitlines()) == 1
    assert git(project, "status", "--porcelain") == "" and git(project, "rev-parse", "HEAD") == head


def test_plain_copier_update_matches_scaffold_update(tmp_path, template_repo):
    ours = new_project(tmp_path, template_repo, name="ours")
    theirs = new_project(tmp_path, template_repo, name="theirs")
    for project in (ours, theirs):
        make_user_edits(project)
    release_version_b(template_repo)

    assert update(ours).exit_code == 0
    command = ["copier", "update", "--defaults", "--conflict", "inline"]
    result = run(command, theirs, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    assert_user_edits_kept(theirs)

    def tree(root):
        return {
            p.relative_to(root).as_posix().replace("theirs", "ours"): p.read_text().replace(
                "theirs", "ours"
            )
            for p in root.rglob("*")
            if p.is_file() and ".git" not in p.parts
        }

    assert tree(theirs) == tree(ours)


def test_team_template_defaults_apply_unless_given(tmp_path, template_repo):
    copier_yml = template_repo / "copier.yml"
    text = copier_yml.read_text()
    amp_question = text[text.index("amp:\n") :]
    amp_question = amp_question[: amp_question.index("\n\n")]
    assert "default: false" in amp_question
    copier_yml.write_text(text.replace(amp_question, amp_question.replace("false", "true")))
    commit_all(template_repo, "team default: AMP on")
    assert answers(new_project(tmp_path, template_repo, name="team"))["amp"] is True
    assert answers(new_project(tmp_path, template_repo, "--no-amp", name="mine"))["amp"] is False


@pytest.mark.slow
def test_pip_installed_scaffold_updates_its_projects_across_versions(tmp_path):
    """Wheel A renders offline; the venv is deleted; wheel B, in a new venv, updates."""
    wheels = {}
    clone = tmp_path / "scaffold-src"
    git(tmp_path, "clone", "-q", str(REPO), str(clone))
    for version in ("A", "B"):
        if version == "B":
            release_version_b(clone)
        dist = tmp_path / f"dist-{version}"
        built = run(
            [PYTHON, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist)], clone
        )
        assert built.returncode == 0, built.stderr[-2000:]
        (wheels[version],) = dist.glob("*.whl")

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    work = tmp_path / "work"
    work.mkdir()

    def venv_with(wheel):
        venv = tmp_path / "venv"
        shutil.rmtree(venv, ignore_errors=True)  # a rebuilt environment: the old paths are gone
        pip = [
            str(venv_sharing_these_packages(venv)),
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-index",
        ]
        assert run([*pip, str(wheel)], work, env=env).returncode == 0
        return venv / "bin" / "scaffold"

    scaffold = venv_with(wheels["A"])
    made = run([str(scaffold), "new", "proj", "-y", "--no-smoke"], work, env=env)
    assert made.returncode == 0, made.stderr
    project = work / "proj"
    recorded = answers(project)
    assert recorded["_src_path"] == str(tmp_path / "scaffold-home" / "template.bundle")
    assert recorded["_commit"]
    make_user_edits(project)  # on the repository scaffold new made

    scaffold = venv_with(wheels["B"])
    checked = run([str(scaffold), "update", "--check"], project, env=env)
    assert "a newer template is available" in checked.stdout, checked.stdout + checked.stderr
    updated = run([str(scaffold), "update"], project, env=env)
    assert updated.returncode == 0, updated.stdout + updated.stderr
    assert_user_edits_kept(project)
    assert NEW_LINE in (project / "src" / "proj" / "engine.py").read_text()
    assert (project / "CHANGELOG.md").is_file()
    assert answers(project)["_commit"] != recorded["_commit"]
