"""The mutation suite: each silent loop bug, injected into a render, fails a test naming it."""

import shutil
from dataclasses import replace

import pytest

from tests import tables
from tests.conftest import TASKS, combo_id
from tests.equivalents import EQUIVALENTS
from tests.mutants import (
    CASES,
    COVERING,
    MUTANTS,
    MutationError,
    apply_edit,
    case_key,
    needed,
    run_mutant,
)


def test_every_rule_has_a_mutant_on_every_option_that_changes_it():
    rules = {m.rule for m in MUTANTS}
    assert rules == {f"R{i}" for i in range(1, 15)} | {
        "S1",
        "S2",
        "D2",
        "D5",
        "D6",
        "T1",
        "T2",
        "T3",
        *(f"M{i}" for i in (1, 2, 3, 4, 5, 8)),  # M6, M7: DDP's broadcast, BatchNorm by design
        *(f"E{i}" for i in range(1, 4)),
        "C4",
        "C5",
        "K1",
        "K2",
    }
    for mutant in MUTANTS:
        assert any(mutant.applies(o) for o in COVERING), mutant.bug
    # Each switch that changes how rules are written is seen both on and off.
    for name in ("amp", "clip", "early_stopping", "distributed", "ema", "compile"):
        assert {getattr(o, name) for o in COVERING} == {False, True}, name
    assert {o.grad_accum for o in COVERING} == {1, 3}
    assert {o.warmup_steps for o in COVERING} == {0, 4}
    assert {o.scheduler for o in COVERING} == {"cosine", "plateau"}
    assert {o.task for o in COVERING} == set(TASKS)


@pytest.mark.parametrize("options", COVERING, ids=combo_id)
def test_every_mutant_still_matches_the_rendered_code(render_combo, tmp_path, options):
    # Seconds, where the slow test below takes minutes a mutant: a template edit that moves an
    # anchored line fails here first, naming every mutant it broke.
    project = render_combo(options).dest
    package = tmp_path / "package"
    shutil.copytree(project / "src" / project.name.replace("-", "_"), package)
    broken = []
    for mutant in (m for m in MUTANTS if m.applies(options)):
        original = (package / mutant.file).read_text()
        try:
            for edit in mutant.edits:
                apply_edit(package / mutant.file, edit)
        except MutationError as err:
            broken.append(f"{mutant.slug}: {err}")
        (package / mutant.file).write_text(original)
    assert not broken, "\n".join(broken)


@pytest.mark.parametrize("options", [o for o in COVERING if o.compile], ids=combo_id)
def test_a_case_left_to_the_eager_combinations_edits_the_code_they_render(render_combo, options):
    # needed() runs a mutant or rewrite on a compile combination only where compile changes
    # the module it edits; elsewhere the eager twin renders the module it would edit,
    # byte for byte (up to the package's name), so the case would add nothing.
    eager = replace(options, compile=False)
    compiled_project, eager_project = render_combo(options).dest, render_combo(eager).dest
    left = {
        case.file
        for case in [*MUTANTS, *EQUIVALENTS]
        if case.applies(options) and not needed(options, case.applies, case.file)
    }
    assert left, "compile changes every module: needed() leaves nothing out"
    for module in sorted(left):
        texts = []
        for project in (compiled_project, eager_project):
            package = project.name.replace("-", "_")
            texts.append((project / "src" / package / module).read_text().replace(package, "P"))
        assert texts[0] == texts[1], f"{module} differs with compile on: its cases must run"
    ran = {c.file for c in [*MUTANTS, *EQUIVALENTS] if needed(options, c.applies, c.file)}
    assert "train.py" in ran, "compile changes train.py: its cases run on compile combinations"


@pytest.mark.proof
@pytest.mark.parametrize("options, mutant", CASES, ids=[case_key(o, m) for o, m in CASES])
def test_mutant_is_caught_by_a_test_naming_its_rule(render_combo, tmp_path, options, mutant):
    project = render_combo(options).dest
    package = project.name.replace("-", "_")
    outcome = run_mutant(project, package, mutant, combo_id(options), tmp_path)
    # Kept for the table (docs/mutation-table.md), written once every case has run.
    tables.record("mutants", case_key(options, mutant), outcome.record())
    assert outcome.runs, f"the mutant must import and run its tests: {outcome.detail}"
    assert outcome.caught_by, (
        f"{mutant.rule} ({mutant.bug}) not caught by a test naming it; failing: {outcome.failed}"
    )
