"""The equivalents suite: each correct rewrite of the loop, rendered, passes every loop test."""

import shutil

import pytest

from tests import tables
from tests.conftest import combo_id
from tests.equivalents import (
    CASES,
    EQUIVALENTS,
    case_key,
    first_line,
    run_equivalent,
    training_fingerprint,
)
from tests.mutants import COVERING, MutationError, apply_edit

_FINGERPRINTS: dict = {}  # rendered project -> how a short run of its generated code ends


def test_every_equivalent_applies_somewhere_and_its_edits_match_the_rendered_code(
    render_combo, tmp_path
):
    """Fast: a template change that moves an anchor fails here, not after the slow runs."""
    assert len({e.slug for e in EQUIVALENTS}) == len(EQUIVALENTS), "two rewrites share a slug"
    problems = []
    for equivalent in EQUIVALENTS:
        combos = [o for o in COVERING if equivalent.applies(o)]
        if not combos:
            problems.append(f"{equivalent.rewrite}: applies to no combination of the covering set")
        for options in combos:
            project = render_combo(options).dest
            module = project / "src" / project.name.replace("-", "_") / equivalent.file
            copy = tmp_path / f"{combo_id(options)}-{equivalent.slug}.py"
            shutil.copyfile(module, copy)
            try:
                for edit in equivalent.edits_for(options):
                    apply_edit(copy, edit)  # raises unless each anchor is found exactly once
            except MutationError as err:
                problems.append(f"{equivalent.rewrite} on {combo_id(options)}: {err}")
                continue
            source = copy.read_text()
            if source == module.read_text():
                problems.append(f"{equivalent.rewrite} on {combo_id(options)}: changed nothing")
            try:
                compile(source, str(copy), "exec")
            except SyntaxError as err:
                problems.append(f"{equivalent.rewrite} on {combo_id(options)}: {err}")
    assert not problems, "\n".join(problems)


@pytest.mark.proof
@pytest.mark.parametrize("options, equivalent", CASES, ids=[case_key(o, e) for o, e in CASES])
def test_equivalent_passes_every_loop_test(render_combo, tmp_path, options, equivalent):
    project = render_combo(options).dest
    package = project.name.replace("-", "_")
    if project not in _FINGERPRINTS:
        _FINGERPRINTS[project] = training_fingerprint(project, package)
    result = run_equivalent(
        project, package, equivalent, options, combo_id(options), tmp_path, _FINGERPRINTS[project]
    )
    # Kept for the table (docs/equivalents-table.md), written once every case has run.
    tables.record("equivalents", case_key(options, equivalent), result.record())
    assert result.ran, f"the rewrite must import and run its tests: {result.detail}"
    assert not result.trains_differently, (
        f"{equivalent.rewrite} is not a correct rewrite: {result.trains_differently}"
    )
    if result.failures:
        pytest.fail(
            f"{equivalent.rewrite}: the tests failed a correct loop: "
            + "; ".join(f"{name}: {first_line(m)}" for name, m in sorted(result.failures.items()))
        )
