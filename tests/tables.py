"""The proof tier's result tables in docs/: each says what it was made from, so a test can tell
when a committed table describes another template than the current one."""

import datetime
import hashlib
import json
import re
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MUTATION_TABLE = REPO / "docs" / "mutation-table.md"
EQUIVALENTS_TABLE = REPO / "docs" / "equivalents-table.md"

STAMP = re.compile(
    r"^Made from template `(?P<hash>[0-9a-f]{16})` on (?P<date>\d{4}-\d{2}-\d{2}) "
    r"over (?P<count>\d+) combinations: (?P<combos>.*)\.$",
    re.M,
)


def template_files() -> list[Path]:
    """What a project is rendered from: copier.yml and every file under template/."""
    files = [REPO / "copier.yml"]
    files += (
        p
        for p in (REPO / "template").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    )
    return sorted(files)


def template_hash() -> str:
    """The first 16 hex digits of a sha256 over the template's paths and bytes."""
    digest = hashlib.sha256()
    for path in template_files():
        digest.update(str(path.relative_to(REPO)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def stamp(combos: list[str], today: datetime.date | None = None) -> str:
    """The line a table starts with: the template's hash, the date and the combinations."""
    today = today or datetime.date.today()
    listed = ", ".join(f"`{c}`" for c in combos)
    count = len(combos)
    return f"Made from template `{template_hash()}` on {today} over {count} combinations: {listed}."


def read_stamp(text: str) -> dict | None:
    """The stamp of a table's text: hash, date and combinations; None without one."""
    found = STAMP.search(text)
    if found is None:
        return None
    combos = re.findall(r"`([^`]+)`", found["combos"])
    return {"hash": found["hash"], "date": found["date"], "combos": combos}


def write(path: Path, title: str, about: str, body: str, combos: list[str]) -> None:
    """Write a table: its title, the stamp, what it shows and how to remake it, the rows."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# {title}\n\n{stamp(combos)}\n\n{about}\n\n{body}")


# Where the proof tier's tests leave their outcomes (one JSON file each, from any xdist worker),
# for the controller to turn into the tables once every case has one.
RESULTS = REPO / ".proof-results"


def clear_results() -> None:
    shutil.rmtree(RESULTS, ignore_errors=True)


def record(suite: str, key: str, data: dict) -> None:
    folder = RESULTS / suite
    folder.mkdir(parents=True, exist_ok=True)
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", key)
    (folder / f"{name}.json").write_text(json.dumps({"key": key, **data}))


def recorded(suite: str) -> dict[str, dict]:
    folder = RESULTS / suite
    records = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
    return {r["key"]: r for r in records}


def every_record(suite: str, keys: list[str]) -> list[dict] | None:
    """The suite's records in the order of `keys`, or None unless every key has one (not after
    a run of some cases, with -k or a failure that stopped pytest)."""
    records = recorded(suite)
    if set(records) != set(keys):
        return None
    return [records[key] for key in keys]
