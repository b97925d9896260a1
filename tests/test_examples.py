"""The committed examples are exactly what the template renders today."""

import importlib.util

from tests.conftest import REPO
from tests.test_copier_and_wheel import tree


def load_regenerate():
    spec = importlib.util.spec_from_file_location("regenerate", REPO / "examples" / "regenerate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_examples_match_a_fresh_render(tmp_path):
    regenerate = load_regenerate()
    for fresh in regenerate.render_examples(tmp_path):
        committed = REPO / "examples" / fresh.name
        assert committed.is_dir(), f"run: python examples/regenerate.py ({fresh.name} missing)"
        assert tree(committed) == tree(fresh), (
            f"examples/{fresh.name} is out of date: run python examples/regenerate.py"
        )
