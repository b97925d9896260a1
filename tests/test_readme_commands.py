"""The README's own set-up and test commands are what CI runs, and they leave scaffold's
template history intact."""

import subprocess

import pytest

from tests.conftest import REPO, run


def readme_commands() -> list[str]:
    """The commands of README.md's first bash block, comments and blank lines left out."""
    text = (REPO / "README.md").read_text()
    block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip() and not line.startswith("#")]


def proof_command() -> str:
    """The one command of the bash block after the README's line "Proof tier:"."""
    text = (REPO / "README.md").read_text().split("\nProof tier:", 1)[1]
    block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    (command,) = [line for line in block.splitlines() if line.strip() and line[0] != "#"]
    return command


def test_ci_runs_exactly_the_readme_commands_then_the_proof_tier():
    printed = run(["bash", str(REPO / ".ci" / "run"), "--print"], REPO, stdin=subprocess.DEVNULL)
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout.splitlines() == [*readme_commands(), proof_command()]
    assert proof_command() == "python -m pytest -n 2 --proof"


def test_readme_sets_up_in_dot_venv_then_runs_pytest():
    setup, tests = readme_commands()
    assert setup.startswith("python -m venv .venv && . .venv/bin/activate && pip install torch==")
    assert " scaffold new demo -y " in setup
    assert tests == "python -m pytest -n 2"


@pytest.mark.skipif(not (REPO / ".git").exists(), reason="not a git checkout")
def test_the_demo_project_is_ignored_by_git():
    # demo/ lands inside the checkout; ignored, it never shows as an untracked change.
    ignored = run(["git", "check-ignore", "-q", "demo/README.md"], REPO)
    assert ignored.returncode == 0


@pytest.mark.parametrize(
    "setup, tests, status, shown",
    [
        ("X=ran", 'echo "$X CI=$CI"; read -t 1 line || echo no-stdin', 0, "ran CI=true"),
        ("false && echo never", "echo tests-ran", 1, ""),  # a failure inside an && chain
        ("true", "exit 5", 1, "pytest collected no tests: that is a failure"),
        ("true", "exit 3", 3, ""),
    ],
)
def test_ci_script_runs_the_commands_in_one_shell_and_fails_on_any_failure(
    tmp_path, setup, tests, status, shown
):
    (tmp_path / ".ci").mkdir()
    (tmp_path / ".ci" / "run").write_text((REPO / ".ci" / "run").read_text())
    readme = (
        f"# p\n\n```bash\n# set up\n{setup}\n\n# test\n{tests}\n```\n\n```bash\nnot run\n```\n"
        "\nProof tier:\n\n```bash\necho proof-ran\n```\n"
    )
    (tmp_path / "README.md").write_text(readme)
    result = run(["bash", ".ci/run"], tmp_path, stdin=subprocess.DEVNULL)
    assert result.returncode == status, result.stdout + result.stderr
    assert shown in result.stdout + result.stderr
    assert "tests-ran" not in result.stdout and "not run" not in result.stdout
    if status == 0:
        assert "no-stdin" in result.stdout
    assert ("proof-ran" in result.stdout) == (status == 0)  # after the tests, and only then
