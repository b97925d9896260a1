"""Every option combination renders to lint-clean Python written for exactly those options."""

import re

import pytest

from tests.conftest import COMBOS, PYTHON, combo_id, combo_numbers, run

# Jinja left unrendered: a {{ variable }}, a {% tag %} or a {# comment. A bare "}}" is not
# counted: Python writes it in nested dicts such as {"model": {}}.
TEMPLATE_SYNTAX = re.compile(r"\{\{ *[\w.|' ()-]+ *\}\}|\{%|%\}|\{#")


@pytest.mark.parametrize("options", COMBOS, ids=combo_id)
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


@pytest.mark.parametrize("options", COMBOS, ids=combo_id)
def test_code_exists_only_for_the_chosen_options(render_combo, options):
    package = render_combo(options).dest / "src" / f"proj_{combo_id(options).replace('-', '_')}"
    engine = (package / "engine.py").read_text()
    train = (package / "train.py").read_text()
    config = (package / "config.py").read_text()
    task = (package / "task.py").read_text()
    assert ("autocast" in engine) == ("GradScaler" in train) == options.amp
    assert ("clip_grad_norm_" in engine) == ("max_grad_norm" in config) == options.clip
    assert ("ReduceLROnPlateau" in train) == ("plateau_patience" in config)
    assert ("ReduceLROnPlateau" in train) == (options.scheduler == "plateau")
    assert ("CosineAnnealingLR" in train) == (options.scheduler == "cosine")
    assert ("epochs_without_improvement" in train) == options.early_stopping
    assert ("CrossEntropyLoss" in task) == (options.task == "classification")
    assert ("MSELoss" in task) == (options.task == "regression")
    # No flags checked at run time for options that were decided at generation time.
    for word in ("use_amp", "if cfg.clip", "early_stopping:", "if cfg.scheduler"):
        assert word not in engine + train + config, word


@pytest.mark.parametrize("options", COMBOS, ids=combo_id)
def test_numeric_answers_land_in_the_config(render_combo, options):
    # COMBOS spread seeds and numbers over the combinations; each must reach config.py as given.
    package = render_combo(options).dest / "src" / f"proj_{combo_id(options).replace('-', '_')}"
    config = (package / "config.py").read_text()
    wanted = {name.split("=")[0]: name.split("=")[1] for name in combo_numbers(options).split()}
    assert "seed" in wanted
    kinds = {"seed": "int", "plateau_patience": "int", "patience": "int", "max_grad_norm": "float"}
    for name, value in wanted.items():
        assert re.search(rf"^    {name}: {kinds[name]} = {re.escape(value)}\b", config, re.M), name
