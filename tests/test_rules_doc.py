"""docs/rules.md defines every rule ID that the template, scaffold and the tests cite."""

import re
from pathlib import Path

from tests.conftest import REPO

RULES = REPO / "docs" / "rules.md"
# Where rule IDs are cited: the code and comments of what is generated, of scaffold (the rule
# table of `scaffold check` included), of the tests and mutants, and the other pages that
# document them. Not examples/: those are renders of template/.
CITING = ["template", "scaffold", "tests", "benchmarks", "README.md", "docs"]

# A rule ID is one capital letter and a number of one or two digits, standing alone as a word
# (R7, S2, M5; not SCF201, H200 or fp16). A range written as R1-R13 cites every ID in it.
CITED = re.compile(r"\b([A-Z])(\d{1,2})(?:-\1(\d{1,2}))?\b")
# docs/rules.md defines an ID as a list item that starts with it in bold: "- **R7** ...".
DEFINED = re.compile(r"^- \*\*([A-Z]\d{1,2})\*\*", re.M)


def cited_ids(text: str) -> set[str]:
    ids = set()
    for letter, first, last in CITED.findall(text):
        ids.update(f"{letter}{n}" for n in range(int(first), int(last or first) + 1))
    return ids


def citing_files() -> list[Path]:
    files = []
    for name in CITING:
        path = REPO / name
        if path.is_dir():
            files += sorted(p for p in path.rglob("*") if p.is_file())
        elif path.is_file():  # an sdist has no benchmarks/
            files.append(path)
    # This file names made-up IDs on purpose (below); rules.md is where IDs are defined.
    skip = {Path(__file__).resolve(), RULES.resolve()}
    return [p for p in files if p.resolve() not in skip and "__pycache__" not in p.parts]


def citations() -> dict[str, list[str]]:
    """Each cited ID and the files that cite it."""
    where: dict[str, list[str]] = {}
    for path in citing_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:  # images and other binary files
            continue
        for rule in cited_ids(text):
            where.setdefault(rule, []).append(str(path.relative_to(REPO)))
    return where


def undefined(where: dict[str, list[str]], rules_text: str) -> dict[str, list[str]]:
    defined = set(DEFINED.findall(rules_text))
    return {rule: files for rule, files in sorted(where.items()) if rule not in defined}


def test_every_cited_rule_is_defined_in_docs_rules_md():
    where = citations()
    assert len(where) >= 40  # the scan found the citations: R1-R15, S, C, D, E, M, T, I
    missing = undefined(where, RULES.read_text())
    assert not missing, "rule IDs cited but not defined in docs/rules.md: " + "; ".join(
        f"{rule} (in {', '.join(files[:3])})" for rule, files in missing.items()
    )


def test_each_rule_is_defined_once():
    defined = DEFINED.findall(RULES.read_text())
    assert len(defined) == len(set(defined)), sorted(r for r in defined if defined.count(r) > 1)


def test_a_made_up_rule_is_reported():
    # The check can fail: an ID that docs/rules.md does not define, alone or in a range, is
    # found and reported; codes and sizes that only look like IDs are not read as rules.
    text = "# Q7: a rule nobody wrote down (R2, Q1-Q3); SCF201, H200 and fp16 are not rules\n"
    assert cited_ids(text) == {"Q7", "R2", "Q1", "Q2", "Q3"}
    missing = undefined({rule: ["x.py"] for rule in cited_ids(text)}, RULES.read_text())
    assert set(missing) == {"Q1", "Q2", "Q3", "Q7"}
