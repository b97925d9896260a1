"""Every option combination renders to lint-clean Python written for exactly those options.

The combinations come from the option definitions (tests/conftest.py), so a new task is
rendered, linted and imported here in every combination without a change to this file.
"""

import ast
import dataclasses
import itertools
import json
import math
import re
from pathlib import Path

import pytest

from scaffold.options import OPTIONS, Options, project_names
from tests.conftest import (
    CODE_NUMBERS,
    COMBOS,
    COVERING,
    FACTORS,
    LATE,
    LATE_SWITCHES,
    LONG,
    LONGEST,
    PYTHON,
    RENDERED,
    REPO,
    TASK_IDS,
    TASKS,
    TRIPLES,
    combo_id,
    combo_numbers,
    covering_set,
    render,
    run,
    run_in_project,
    task_ids,
    wider_renders,
)

# Jinja left unrendered: a {{ variable }}, a {% tag %} or a {# comment. A bare "}}" is not
# counted: Python writes it in nested dicts such as {"model": {}}.
TEMPLATE_SYNTAX = re.compile(r"\{\{ *[\w.|' ()-]+ *\}\}|\{%|%\}|\{#")

# What makes a task (issue 10): its own modules behind the interface the shared code uses.
TASK_UNIT = ("task.py", "data.py", "model.py")
# Files every task shares as they are: the training code and the contract tests. They may
# name the project's own task as a value (checkpoints record it) but must not otherwise
# differ between tasks, which is how "shared files never branch on a task's name" shows in
# rendered output. {package} is the package folder.
SHARED_FILES = (
    "src/{package}/__init__.py",
    "src/{package}/checkpoint.py",
    "src/{package}/config.py",
    "src/{package}/ending.py",
    "src/{package}/engine.py",
    "src/{package}/evaluate.py",
    "src/{package}/export.py",
    "src/{package}/inputs.py",
    "src/{package}/interface.py",
    "src/{package}/overfit.py",
    "src/{package}/plot.py",
    "src/{package}/predict.py",
    "src/{package}/progress.py",
    "src/{package}/seed.py",
    "src/{package}/stopping.py",
    "src/{package}/tracking.py",
    "src/{package}/train.py",
    "src/{package}/tune.py",
    "tests/contract_config.py",
    "tests/loop_recorder.py",
    "tests/predict_runs.py",
    "tests/test_contract.py",
    "tests/test_contract_epochs.py",
    "tests/test_export.py",
    "tests/test_predict.py",
    "tests/test_tracking.py",
    "tests/test_tune.py",
    "tests/test_unusable_inputs.py",
    "tests/test_watch.py",
)


def package_of(options: Options) -> str:
    return project_names(f"proj-{combo_id(options)}")[1]


def factor_values(options: Options) -> tuple:
    return tuple(getattr(options, name) for name in FACTORS)


def pairs_of(options: Options, names) -> set:
    return set(itertools.combinations([(n, getattr(options, n)) for n in names], 2))


def test_combinations_are_the_product_of_every_choice_and_switch():
    # Counted from copier.yml independently of conftest: each question with choices, and
    # each yes/no question, multiplies the combinations.
    # The code numbers (CODE_NUMBERS: int options that decide which code is rendered) add two
    # values each.
    # The late switches (LATE_SWITCHES: compile) come first in the product, with the numbers.
    shaping = [q for q in OPTIONS.values() if q.choices or q.type is bool]
    assert [q.name for q in shaping if q.name not in LATE] == [n for n in FACTORS if n not in LATE]
    assert list(FACTORS)[: len(LATE)] == [*reversed(LATE_SWITCHES), *CODE_NUMBERS]
    assert all(OPTIONS[name].type is bool for name in LATE_SWITCHES)
    assert {"task", "scheduler", "amp", "clip", "early_stopping", "distributed"} <= set(FACTORS)
    assert {"grad_accum", "warmup_steps"} <= set(CODE_NUMBERS) <= set(FACTORS)
    for name, value in CODE_NUMBERS.items():
        assert OPTIONS[name].type is int and FACTORS[name] == (OPTIONS[name].default, value)
    assert TASKS == OPTIONS["task"].choices and len(TASKS) >= 2
    assert len(COMBOS) == math.prod(len(q.choices or (False, True)) for q in shaping) * 2 ** len(
        CODE_NUMBERS
    )
    assert len({factor_values(o) for o in COMBOS}) == len(COMBOS)
    assert factor_values(COMBOS[0]) == factor_values(Options())  # the defaults come first
    for options in COMBOS:
        options.validate()  # the spread numbers are answers scaffold accepts


def test_combo_ids_are_unique_and_make_valid_package_names():
    assert len(set(TASK_IDS.values())) == len(TASKS), TASK_IDS
    # The ids of the first two tasks are in test names, docs and mutation tables: kept.
    assert TASK_IDS["classification"] == "cla" and TASK_IDS["regression"] == "reg"
    ids = [combo_id(o) for o in COMBOS]
    assert len(set(ids)) == len(ids)
    assert ids[0] == "cla-cosine-fp32-noclip-noes-noddp-noema"
    for options, name in zip(COMBOS, ids, strict=True):
        # A code number's word only where it is not its default: the ids without it stay.
        # A late switch's word likewise, only when it is on.
        numbers = sum(getattr(options, n) != FACTORS[n][0] for n in LATE)
        assert len(name.split("-")) == len(FACTORS) - len(LATE) + numbers, name
        assert re.fullmatch(r"proj_[a-z0-9_]+", package_of(options)), name  # or UsageError


def test_task_ids_derive_from_the_words_and_grow_until_unique():
    assert task_ids(("classification", "regression", "image-classification")) == {
        "classification": "cla",
        "regression": "reg",
        "image-classification": "imacla",
    }
    # Two names that share their first letters get more of them, for every task alike.
    assert task_ids(("segmentation", "segment", "image-segmentation")) == {
        "segmentation": "segmenta",
        "segment": "segment",
        "image-segmentation": "imagesegmenta",
    }


def check_covers_every_pair(chosen: list, offered: list, names) -> None:
    needed = set().union(*(pairs_of(o, names) for o in offered))
    covered = set().union(*(pairs_of(o, names) for o in chosen))
    assert needed <= covered, sorted(needed - covered)
    assert all(o in offered for o in chosen)
    assert len({factor_values(o) for o in chosen}) == len(chosen)  # no set twice


def test_the_covering_set_covers_every_pair_of_values_in_few_combinations():
    check_covers_every_pair(COVERING, COMBOS, FACTORS)
    assert COVERING == covering_set()  # deterministic: the same set on every run
    assert factor_values(COVERING[0]) == factor_values(Options())
    assert len(COVERING) <= len(COMBOS) / 4, [combo_id(o) for o in COVERING]
    # The code numbers add sets to the set without them, which stays as it was: grad_accum and
    # warmup_steps add one per task (each value's pair with a task needs its own set), and one
    # more for the pairs of the two numbers (accumulation without a warm-up and the reverse).
    # compile, which joined after them, adds one set per task to the set chosen without it.
    plain = [o for o in COMBOS if all(getattr(o, n) == FACTORS[n][0] for n in LATE)]
    rest = [name for name in FACTORS if name not in LATE]
    without = covering_set(plain, rest)
    eager = [o for o in COMBOS if all(getattr(o, n) == FACTORS[n][0] for n in LATE_SWITCHES)]
    with_numbers = covering_set(eager, [n for n in FACTORS if n not in LATE_SWITCHES])
    assert with_numbers[: len(without)] == without
    assert len(with_numbers) - len(without) == len(TASKS) + 1, list(map(combo_id, with_numbers))
    assert COVERING[: len(with_numbers)] == with_numbers
    assert len(COVERING) - len(with_numbers) == len(TASKS), [combo_id(o) for o in COVERING]


def test_the_three_way_set_covers_every_three_values_and_the_tiers_split_the_renders():
    offered = set().union(*(set(itertools.combinations(values(o), 3)) for o in COMBOS))
    covered = set().union(*(set(itertools.combinations(values(o), 3)) for o in TRIPLES))
    assert offered == covered, sorted(offered - covered)[:5]
    assert TRIPLES == covering_set(strength=3)
    # Far fewer than the product: the proof tier's renders grow with each new switch by a few
    # combinations, not by a doubling.
    assert len(TRIPLES) <= len(COMBOS) / 4, len(TRIPLES)
    # The everyday tier renders the pairwise set; the proof tier the rest of the three-way set
    # (or of every combination), never one the everyday tier already rendered.
    assert RENDERED == COVERING
    for wide in (False, True):
        rest = wider_renders(wide)
        assert not set(map(combo_id, rest)) & set(map(combo_id, COVERING))
        assert {combo_id(o) for o in rest + COVERING} >= {
            combo_id(o) for o in (COMBOS if wide else TRIPLES)
        }


def test_the_tests_started_first_exist():
    # conftest sorts these to the front by name: a renamed test would silently start last.
    defined = {
        node.name
        for path in Path(__file__).parent.glob("test_*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
    }
    assert set(LONGEST + LONG) <= defined, set(LONGEST + LONG) - defined


def values(options: Options) -> list:
    return [(name, getattr(options, name)) for name in FACTORS]


# The fewest combinations that cover every pair: 6 for five two-valued factors (a known
# result; 4 do not suffice), and tasks x schedulers once there are three tasks or more.
@pytest.mark.parametrize("tasks, fewest", [(2, 6), (3, 6), (4, 8)])
def test_covering_set_of_more_tasks_is_as_small_as_possible(tasks, fewest):
    # Tasks that do not exist (yet): the set must cover every pair all the same.
    factors = {
        "task": tuple(f"task-{i}" for i in range(tasks)),
        "scheduler": ("cosine", "plateau"),
        "amp": (False, True),
        "clip": (False, True),
        "early_stopping": (False, True),
    }
    values = itertools.product(*factors.values())
    offered = [Options(**dict(zip(factors, v, strict=True))) for v in values]
    chosen = covering_set(offered, factors)
    check_covers_every_pair(chosen, offered, factors)
    assert len(chosen) == fewest
    # A list that lacks some pairs (no AMP here) gets the pairs it has covered, and ends.
    no_amp = [o for o in offered if not o.amp]
    check_covers_every_pair(covering_set(no_amp, factors), no_amp, factors)


@pytest.mark.tiered
@pytest.mark.parametrize("options", RENDERED, ids=combo_id)
def test_render_is_lint_clean_with_no_template_syntax_left(render_combo, options):
    result = render_combo(options)
    project = result.dest
    # The rendered files only: other tests may have run this project and left outputs.
    files = [project / rel for rel in result.files]
    assert not [p for p in files if p.suffix in (".jinja", ".pyc") or "__pycache__" in p.parts]
    for path in files:
        assert not TEMPLATE_SYNTAX.search(path.read_text()), path
    # Each project lints with its own pyproject settings, as its users would run ruff.
    check = run([PYTHON, "-m", "ruff", "check", "--no-cache", "."], cwd=project)
    assert check.returncode == 0, check.stdout + check.stderr
    fmt = run([PYTHON, "-m", "ruff", "format", "--check", "--no-cache", "."], cwd=project)
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr


# The longest name copier.yml allows. Lines that name the package (the tests' imports) are
# written so that the formatter leaves them as they are at any length up to it.
LONGEST_NAME = 60


@pytest.mark.parametrize("options", COVERING, ids=combo_id)
def test_render_with_the_longest_allowed_name_is_lint_clean(tmp_path, options):
    name = f"long-{combo_id(options)}-".ljust(LONGEST_NAME, "n")
    assert len(name) == LONGEST_NAME
    project = render(tmp_path / name, options).dest
    check = run([PYTHON, "-m", "ruff", "check", "--no-cache", "."], cwd=project)
    assert check.returncode == 0, check.stdout + check.stderr
    fmt = run([PYTHON, "-m", "ruff", "format", "--check", "--no-cache", "."], cwd=project)
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr


# Imports every module of the package, prints the options resume.py records, then lets pytest
# collect the project's tests in the same interpreter (torch is imported once): about 3 s.
IMPORT_ALL = """
import importlib, json, pkgutil, sys
import pytest
package = importlib.import_module(sys.argv[1])
names = sorted(m.name for m in pkgutil.iter_modules(package.__path__))
for name in names:
    importlib.import_module(f"{sys.argv[1]}.{name}")
resume = importlib.import_module(f"{sys.argv[1]}.resume")
print(json.dumps({"modules": names, "project": resume.PROJECT}), flush=True)
every = ["-m", "probe or not probe"]  # both of the project's tiers
sys.exit(pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", *every]))
"""


# Every rendered combination: most run no test suite of their own, and a module or a test file
# that fails to import is caught here.
@pytest.mark.tiered
@pytest.mark.parametrize("options", RENDERED, ids=combo_id)
def test_every_module_imports_and_every_test_file_collects(render_combo, options):
    project = render_combo(options).dest
    package = package_of(options)
    result = run_in_project(["-c", IMPORT_ALL, package], project, options)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report, *collected = result.stdout.splitlines()
    report = json.loads(report)
    files = sorted(p.stem for p in (project / "src" / package).glob("*.py"))
    assert report["modules"] == [f for f in files if f != "__init__"]
    assert {p.removesuffix(".py") for p in TASK_UNIT} | {"interface"} <= set(report["modules"])
    # The project records the options it was rendered with; a resume checks them. Not
    # `distributed`: a checkpoint holds the same states with it and without it, so a run
    # started as one project resumes in the other. `ema` only when on: a project rendered
    # without it is byte for byte what scaffold rendered before the option existed.
    # Nor the code numbers: grad_accum and warmup_steps are settings in the checkpoint's
    # config, which a resume checks with the other settings; a warm-up's schedule has another
    # state than an epoch scheduler's, so `warmup` is recorded, when on.
    # Nor compile: compiled and eager runs save the same states (C4), and `compile` is a
    # setting, changeable on resume.
    skipped = {"distributed", *CODE_NUMBERS, *LATE_SWITCHES}
    recorded = {name: getattr(options, name) for name in FACTORS if name not in skipped}
    if not options.ema:
        del recorded["ema"]
    if options.warmup_steps:
        recorded["warmup"] = True
    assert report["project"] == {"package": package, **recorded}
    with_tests = {line.split("::")[0] for line in collected if "::" in line}
    test_files = {str(p.relative_to(project)) for p in (project / "tests").glob("test_*.py")}
    assert with_tests == test_files, test_files - with_tests
    assert re.fullmatch(r"\d+ tests collected in .*", collected[-1]), collected[-1]


def shared_text(options: Options, path: str, project) -> str:
    """A shared file with this project's names and task replaced by placeholders."""
    package = project.name.replace("-", "_")
    text = (project / path.format(package=package)).read_text()
    text = text.replace(package, "PACKAGE").replace(project.name, "PROJECT")
    return text.replace(options.task, "TASK")


# The first task's renders of the tier; every other task is rendered with exactly its answers.
BASES = [o for o in RENDERED if o.task == TASKS[0]]


@pytest.mark.tiered
@pytest.mark.parametrize("base", BASES, ids=lambda o: combo_id(o).split("-", 1)[1])
def test_tasks_differ_only_in_their_own_files(render_combo, base):
    # Every task with the same other answers (numbers included), so that only the task differs.
    projects = {task: render_combo(dataclasses.replace(base, task=task)).dest for task in TASKS}
    for task, project in projects.items():
        package = project / "src" / project.name.replace("-", "_")
        for name in (*TASK_UNIT, "interface.py"):
            assert (package / name).is_file(), (task, name)
    for path in SHARED_FILES:
        texts = {
            task: shared_text(dataclasses.replace(base, task=task), path, project)
            for task, project in projects.items()
        }
        first = texts[TASKS[0]]
        for task, text in texts.items():
            assert text == first, f"{path} differs between {TASKS[0]} and {task}"
            named = [t for t in TASKS if t in text]
            assert not named, f"{path} of a {task} project names {named}"
    # And no task silently gets another's code: each task module is the task's own.
    for a, b in itertools.combinations(TASKS, 2):
        pa, pb = projects[a], projects[b]
        own_a = (pa / "src" / pa.name.replace("-", "_") / "task.py").read_text()
        own_b = (pb / "src" / pb.name.replace("-", "_") / "task.py").read_text()
        assert own_a != own_b, f"{a} and {b} render the same task.py"


# train.py and the modules it is built from.
TRAINING_MODULES = ("train", "console", "device", "optim", "resume", "state", "midepoch")
TRAINING_MODULES += ("run_files", "stopping", "ending")


@pytest.mark.tiered
@pytest.mark.parametrize("options", RENDERED, ids=combo_id)
def test_code_exists_only_for_the_chosen_options(render_combo, options):
    package = render_combo(options).dest / "src" / package_of(options)
    engine = (package / "engine.py").read_text()
    # The training code: train.py and the modules it is built from.
    train = "".join((package / f"{name}.py").read_text() for name in TRAINING_MODULES)
    config = (package / "config.py").read_text()
    assert ("autocast" in engine) == ("GradScaler" in train) == options.amp
    assert ("clip_grad_norm_" in engine) == ("max_grad_norm" in config) == options.clip
    assert ("ReduceLROnPlateau" in train) == ("plateau_patience" in config)
    assert ("ReduceLROnPlateau" in train) == (options.scheduler == "plateau")
    cosine_by_epoch = options.scheduler == "cosine" and not options.warmup_steps
    assert ("CosineAnnealingLR" in train) == cosine_by_epoch
    assert ("warmup_steps" in config) == (package / "warmup.py").exists()
    assert (package / "warmup.py").exists() == (options.warmup_steps > 0)
    assert ("schedule.step()" in engine) == (options.warmup_steps > 0)
    assert ("epochs_without_improvement" in train) == options.early_stopping
    assert ("WeightAverage" in train) == ("ema_decay" in config) == options.ema
    assert (package / "ema.py").exists() == options.ema
    assert ("compile_model" in train) == ("compile: bool" in config) == options.compile
    assert (package / "compiling.py").exists() == options.compile
    assert "torch.compile" not in train + engine  # only compiling.py calls it
    # No flags checked at run time for options that were decided at generation time.
    for word in ("use_amp", "if cfg.clip", "early_stopping:", "if cfg.scheduler"):
        assert word not in engine + train + config, word


def unused_definitions(package: Path) -> list[str]:
    """The functions, classes and constants of a package's modules that none of its code uses
    (by name or as an attribute): code rendered for an option the project does not have."""
    trees = {path: ast.parse(path.read_text()) for path in sorted(package.glob("*.py"))}
    used = set()
    for node in (n for tree in trees.values() for n in ast.walk(tree)):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            used.add(node.id)
        elif isinstance(node, ast.Attribute):
            used.add(node.attr)
    unused = []
    for path, tree in trees.items():
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                names = [node.name]
            elif isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            else:
                continue
            unused += [
                f"{path.name}: {name}"
                for name in names
                if not name.startswith("__") and name not in used  # dunders are Python's
            ]
    return unused


@pytest.mark.tiered
@pytest.mark.parametrize("options", RENDERED, ids=combo_id)
def test_every_definition_of_a_render_is_used_by_its_own_code(render_combo, options):
    # load_best was once rendered into projects without early stopping, where nothing called it.
    package = render_combo(options).dest / "src" / package_of(options)
    assert unused_definitions(package) == []
    # train.py is the recipe and the command line, not a library: no module imports from it.
    importers = [
        path.name
        for path in package.glob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and node.module == "train"
    ]
    assert importers == []


def test_unused_definitions_finds_a_function_nothing_calls(tmp_path):
    (tmp_path / "a.py").write_text("def used():\n    pass\n\n\ndef unused():\n    used()\n")
    (tmp_path / "b.py").write_text("import a\n\nLIMIT = 3\na.used()\n__all__ = []\n")
    assert unused_definitions(tmp_path) == ["a.py: unused", "b.py: LIMIT"]


@pytest.mark.tiered
@pytest.mark.parametrize("options", RENDERED, ids=combo_id)
def test_numeric_answers_land_in_the_config(render_combo, options):
    # COMBOS spread seeds and numbers over the combinations; each must reach config.py as given.
    package = render_combo(options).dest / "src" / package_of(options)
    config = (package / "config.py").read_text()
    wanted = {name.split("=")[0]: name.split("=")[1] for name in combo_numbers(options).split()}
    assert "seed" in wanted
    kinds = {"seed": "int", "plateau_patience": "int", "patience": "int", "max_grad_norm": "float"}
    kinds["ema_decay"] = "float"
    for name, value in wanted.items():
        assert re.search(rf"^    {name}: {kinds[name]} = {re.escape(value)}\b", config, re.M), name


@pytest.mark.tiered
@pytest.mark.parametrize("options", RENDERED, ids=combo_id)
def test_template_options_are_the_answers_the_project_was_rendered_with(render_combo, options):
    # MLflow tags each run with them: every answer but the names, a follow-up only with its switch.
    package = render_combo(options).dest / "src" / package_of(options)
    tree = ast.parse((package / "__init__.py").read_text())
    (assigned,) = [
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign) and node.targets[0].id == "TEMPLATE_OPTIONS"
    ]
    assert ast.literal_eval(assigned) == options.answers()


@pytest.mark.parametrize("task", TASKS)
def test_readme_installs_the_chosen_torch_before_the_project_and_keeps_it(render_combo, task):
    """The install block takes a CPU torch from PyTorch's index before the project, so pip
    never pulls the multi-GB CUDA build from PyPI onto a CPU machine; and the torch the README
    says pip keeps really satisfies the project's requirement."""
    from packaging.requirements import Requirement
    from packaging.version import Version

    project = render_combo(next(o for o in COMBOS if o.task == task)).dest
    readme = (project / "README.md").read_text()
    block = readme.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    torch_line = next(i for i, line in enumerate(block) if line.startswith("pip install torch "))
    project_line = next(i for i, line in enumerate(block) if line.startswith("pip install -e "))
    assert torch_line < project_line, block
    assert "--index-url https://download.pytorch.org/whl/cpu" in block[torch_line]
    assert "https://download.pytorch.org/whl/cuXYZ" in readme  # the GPU build, named
    assert "python -m venv --system-site-packages .venv" in readme  # reusing a torch
    pyproject = (project / "pyproject.toml").read_text()
    [spec] = [
        Requirement(line.strip().strip('",'))
        for line in pyproject.splitlines()
        if line.strip().startswith('"torch')
    ]
    assert f"`{spec}`" in readme  # the README states the requirement the project declares
    import torch

    installed = Version(torch.__version__.split("+")[0])
    assert spec.specifier.contains(installed), (spec, installed)  # 2.13 here: pip keeps it


# The shape of the project (issue 26): files a reader can take in. train.py reads as a recipe,
# fit() on its first screens; the guards live in modules of their own.
MAX_TEMPLATE_LINES = 450  # any file of the template (a part included by another counts alone)
MAX_TRAIN_LINES = 350  # train.py as rendered, for every combination
FIT_WITHIN = 120  # the line by which train.py's fit() has started
MAX_DATA_LINES = 350  # each task's data.py as rendered: its interface; formats have modules


def test_no_template_file_is_longer_than_a_reader_takes_in():
    long = {
        path.relative_to(REPO).as_posix(): n
        for path in (REPO / "template").rglob("*")
        if path.is_file() and (n := len(path.read_text().splitlines())) > MAX_TEMPLATE_LINES
    }
    assert not long, f"template files over {MAX_TEMPLATE_LINES} lines: {long}"


@pytest.mark.tiered
@pytest.mark.parametrize("options", RENDERED, ids=combo_id)
def test_train_py_is_a_recipe_with_fit_on_its_first_screens(render_combo, options):
    package = render_combo(options).dest / "src" / package_of(options)
    train = (package / "train.py").read_text().splitlines()
    fit = next(n for n, line in enumerate(train, 1) if line.startswith("def fit("))
    assert len(train) <= MAX_TRAIN_LINES, f"train.py has {len(train)} lines"
    assert fit <= FIT_WITHIN, f"fit() starts at line {fit}"
    data = len((package / "data.py").read_text().splitlines())
    assert data <= MAX_DATA_LINES, f"data.py has {data} lines"
    # Nothing imports from train.py: it is the entry point, not a library.
    imports_train = re.compile(r"from \.train import|from \. import .*\btrain\b")
    importers = [p.name for p in package.glob("*.py") if imports_train.search(p.read_text())]
    assert not importers, f"modules that import train.py: {importers}"
