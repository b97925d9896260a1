"""The contract between the shared code and a task (interface.py), checked by a type checker.

mypy, not pyright: a pip wheel (pyright needs node), and it reads the generated project's own
pyproject.toml ([tool.mypy]). One render per task: the shared modules that take a task's objects
as interface.py's protocols are checked, with a module written here that hands each of the
task's classes (task.py, data.py) to the protocol it must meet.
"""

import shutil
import subprocess
import sys

import pytest

from tests.conftest import COVERING, TASKS, combo_id

ONE_PER_TASK = [next(o for o in COVERING if o.task == t) for t in TASKS]

# Where a task's objects enter shared code, typed with interface.py's protocols.
SHARED = ("interface", "engine", "progress", "resume")

# Each class of a task, as the shared code takes it: mypy fails here when one misses a protocol.
CONFORMANCE = '''"""Written by scaffold's tests/test_types.py: a task's classes as the protocols."""

from . import interface
from .data import Batches, Data, NewData, Split
from .task import Task


def task(value: Task) -> interface.Task:
    return value


def data(value: Data) -> interface.Data:
    return value


def split(value: Split) -> interface.Split:
    return value


def new_data(value: NewData) -> interface.NewData:
    return value


def batches(value: Batches) -> interface.Batches:
    return value
'''


@pytest.fixture(scope="session")
def mypy_cache(tmp_path_factory):
    """One cache for the session: torch's stubs are read once (tens of seconds), not per render."""
    return tmp_path_factory.mktemp("mypy-cache")


def copy(project, tmp_path):
    """A copy to add a module to: the session's render stays as the other tests read it."""
    return shutil.copytree(project, tmp_path / project.name)


def mypy(project, cache) -> subprocess.CompletedProcess:
    package = project.name.replace("-", "_")
    (project / "src" / package / "_contract.py").write_text(CONFORMANCE)
    modules = [*SHARED, "_contract"]
    if (project / "src" / package / "distributed.py").is_file():
        modules.append("distributed")
    files = [f"src/{package}/{name}.py" for name in modules]
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(cache), *files],
        cwd=project,
        capture_output=True,
        text=True,
    )


@pytest.mark.parametrize("options", ONE_PER_TASK, ids=combo_id)
def test_each_task_meets_the_interface(render_combo, mypy_cache, tmp_path, options):
    project = copy(render_combo(options).dest, tmp_path)
    result = mypy(project, mypy_cache)
    assert result.returncode == 0, result.stdout + result.stderr


# The check has teeth: a task whose classes miss the interface fails it, naming the member.
BREAKS = {
    "loss-returns-str": ("task.py", "def loss(", "-> torch.Tensor:", "-> str:", "loss"),
    "batch_stats-renamed": ("task.py", "def batch_stats(", "batch_stats", "sums", "batch_stats"),
    "example-renamed": ("data.py", "def example(", "example", "sample_inputs", "example"),
}
REGRESSION = next(o for o in ONE_PER_TASK if o.task == "regression")  # its task.py has them all


@pytest.mark.parametrize("name", BREAKS)
def test_a_task_that_breaks_the_interface_fails_the_check(render_combo, mypy_cache, tmp_path, name):
    module, line_start, old, new, member = BREAKS[name]
    project = copy(render_combo(REGRESSION).dest, tmp_path)
    path = project / "src" / project.name.replace("-", "_") / module
    lines = path.read_text().splitlines(keepends=True)
    [i] = [i for i, line in enumerate(lines) if line.lstrip().startswith(line_start)]
    lines[i] = lines[i].replace(old, new)
    path.write_text("".join(lines))
    result = mypy(project, mypy_cache)
    assert result.returncode == 1, result.stdout + result.stderr
    assert member in result.stdout and "_contract.py" in result.stdout, result.stdout
