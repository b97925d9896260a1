"""The committed examples are exactly what the template renders today, one per task."""

import importlib.util

from scaffold.options import OPTIONS
from tests.conftest import REPO
from tests.test_copier_and_wheel import tree

FIX = "run: python examples/regenerate.py"


def load_regenerate():
    spec = importlib.util.spec_from_file_location("regenerate", REPO / "examples" / "regenerate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_task_has_one_example_and_the_readme_lists_them():
    regenerate = load_regenerate()
    examples = regenerate.examples()
    assert sorted(o.task for o in examples.values()) == sorted(OPTIONS["task"].choices)
    # A task without a chosen example gets one with its defaults, under a name of its own.
    for task in OPTIONS["task"].choices:
        if task not in {o.task for o in regenerate.NAMED.values()}:
            assert examples[f"{task}-minimal"] == regenerate.Options(task=task)
    # Together the examples show every option's code: each boolean option on in one of them,
    # each choice of the scheduler, and accumulation and warm-up.
    for name, question in OPTIONS.items():
        values = {getattr(o, name) for o in examples.values()}
        if question.type is bool:
            assert True in values, f"no example with {name} on"
    assert {o.scheduler for o in examples.values()} == set(OPTIONS["scheduler"].choices)
    assert any(o.grad_accum > 1 for o in examples.values())
    assert any(o.warmup_steps > 0 for o in examples.values())
    committed = {p.name for p in (REPO / "examples").iterdir() if p.is_dir()}
    committed.discard("__pycache__")
    assert committed == set(examples), FIX
    readme = (REPO / "examples" / "README.md").read_text()
    assert regenerate.readme_table() in readme, FIX


def test_committed_examples_match_a_fresh_render(tmp_path):
    regenerate = load_regenerate()
    for fresh in regenerate.render_examples(tmp_path):
        committed = REPO / "examples" / fresh.name
        assert committed.is_dir(), f"{FIX} ({fresh.name} missing)"
        assert tree(committed) == tree(fresh), f"examples/{fresh.name} is out of date: {FIX}"
