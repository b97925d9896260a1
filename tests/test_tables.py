"""The committed result tables describe the current template: made from it, over the covering
set the proof tier runs, with a row for every mutant and rewrite there is now."""

import datetime
import re

import pytest

from tests import equivalents, mutants, tables
from tests.conftest import combo_id

REMAKE = (
    "run the proof tier (python -m pytest -n 2 --proof), which rewrites it, and commit the table"
)


def rows(text: str) -> list[str]:
    """The first two cells of each row of the table: what the row is about."""
    lines = [line for line in text.splitlines() if line.startswith("| ")][1:]
    return [" | ".join(c.strip() for c in line[2:].split(" | ")[:2]) for line in lines]


@pytest.mark.parametrize(
    "path, suite",
    [(tables.MUTATION_TABLE, mutants), (tables.EQUIVALENTS_TABLE, equivalents)],
    ids=["mutation-table", "equivalents-table"],
)
def test_committed_table_was_made_from_the_current_template(path, suite):
    text = path.read_text()
    made = tables.read_stamp(text)
    assert made is not None, f"{path.name} does not say what it was made from: {REMAKE}"
    assert made["hash"] == tables.template_hash(), (
        f"{path.name} was made from template {made['hash']} on {made['date']}; the template is "
        f"{tables.template_hash()} now: {REMAKE}"
    )
    assert made["combos"] == list(dict.fromkeys(combo_id(o) for o, _ in suite.CASES)), REMAKE
    if suite is mutants:
        applied = {m for _, m in suite.CASES}
        wanted = list(dict.fromkeys(f"{m.rule} | {m.bug}" for m in suite.MUTANTS if m in applied))
        assert rows(text) == wanted, REMAKE
        count = len(suite.CASES)
        assert f"{count} of {count} mutants caught" in text, "a mutant was not caught"
    else:
        applied = {e.rewrite for _, e in suite.CASES}
        wanted = [f"{e.file} | {e.rewrite}" for e in suite.EQUIVALENTS if e.rewrite in applied]
        assert rows(text) == wanted, REMAKE
        assert f"{len(wanted)} of {len(wanted)} equivalents pass" in text, "a rewrite failed"


def test_the_hash_follows_every_template_file_and_only_those(tmp_path, monkeypatch):
    before = tables.template_hash()
    assert re.fullmatch(r"[0-9a-f]{16}", before)
    files = tables.template_files()
    assert tables.REPO / "copier.yml" in files
    assert any(p.name == "engine.py.jinja" for p in files)
    assert not any("__pycache__" in p.parts for p in files)
    # A copy of the template with one byte changed hashes differently; the same bytes alike.
    monkeypatch.setattr(tables, "REPO", tmp_path)
    (tmp_path / "template").mkdir()
    (tmp_path / "copier.yml").write_text("a: 1\n")
    (tmp_path / "template" / "x.jinja").write_text("x\n")
    first = tables.template_hash()
    assert tables.template_hash() == first
    (tmp_path / "template" / "x.jinja").write_text("y\n")
    assert tables.template_hash() != first
    (tmp_path / "template" / "x.jinja").write_text("x\n")
    (tmp_path / "template" / "x.jinja").rename(tmp_path / "template" / "z.jinja")
    assert tables.template_hash() != first  # a renamed file renders elsewhere


def test_a_stamp_reads_back_what_it_was_given():
    line = tables.stamp(["cla-a", "reg-b"], datetime.date(2026, 12, 2))
    assert tables.read_stamp(f"# T\n\n{line}\n\nrows") == {
        "hash": tables.template_hash(),
        "date": "2026-12-02",
        "combos": ["cla-a", "reg-b"],
    }
    assert tables.read_stamp("# an old table without a stamp\n") is None
