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


def test_ci_runs_exactly_the_readme_commands():
    printed = run(["bash", str(REPO / ".ci" / "run"), "--print"], REPO, stdin=subprocess.DEVNULL)
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout.splitlines() == readme_commands()


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
