"""`scaffold check` on real repositories: every finding judged, and bugs injected into real scripts.

    python benchmarks/check_corpus.py TREES                 # findings, verdicts, precision, speed
    python benchmarks/check_corpus.py TREES --inject        # and the injected bugs: recall
    python benchmarks/check_corpus.py TREES --inject --markdown benchmarks/results/check_corpus.md

TREES is a folder with one checked-out repository per subfolder, named owner+name (as the
search tool's `fetch` names its mirrors). Nothing fetched is committed; CI cannot fetch, so no
test runs this on real repositories. To make TREES from the mirrors:

    for g in /work/.mirror/*/repo; do n=$(basename $(dirname $g)); mkdir -p TREES/$n
      git --git-dir=$g ls-tree -r --name-only HEAD | grep '\\.py$' | while read f; do
        mkdir -p "TREES/$n/$(dirname "$f")"; git --git-dir=$g show "HEAD:$f" > "TREES/$n/$f"
      done; done

Each repository is checked as one run (`scaffold check REPO`), as its users would run it, with
the default rules; SCF2301 (torch.load without weights_only) is counted apart from the loop
rules. A finding's verdict is looked up in VERDICTS by (repository, path, code, the text of its
line), so a verdict outlives lines moved by unrelated edits; a finding with no verdict is
printed as `unjudged` and counts as false until someone judges it.

Injections: each INJECTIONS entry replaces one exact piece of text of one real script with a
classic bug, written in that script's own style, in a copy of its repository; it is caught when
the check of the copy reports the expected code at a line it did not report before. They run
one at a time.

To measure the code of an older commit: `git archive OLD scaffold | tar -x -C /tmp/old` and run
this script with PYTHONPATH=/tmp/old.
"""

import argparse
import ast
import datetime
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path and "scaffold" not in sys.modules:
    sys.path.append(str(REPO_ROOT))  # after PYTHONPATH: an older copy given there wins

from scaffold.check.run import check_paths  # noqa: E402

LOAD = "SCF2301"  # torch.load without weights_only: counted apart from the loop rules


# --- verdicts: (repo, path, code, stripped line text) -> (verdict, why) ---

T, D, F = "true", "debatable", "false"
VERDICTS: dict = {}


def verdict(repo, path, code, line, judged, why):
    VERDICTS[repo, path, code, line.strip()] = (judged, why)


# --- injections ---


@dataclass
class Injection:
    repo: str
    path: str
    old: str
    new: str
    codes: tuple
    bug: str
    scope: tuple = ()  # the paths checked, relative to the repository; the whole one if empty


INJECTIONS: list = []


# --- running ---


@dataclass
class Row:
    repo: str
    path: str
    line: int
    code: str
    text: str
    verdict: str
    why: str


def python_lines(folder: Path) -> int:
    total = 0
    for path in folder.rglob("*.py"):
        try:
            total += path.read_bytes().count(b"\n")
        except OSError:
            pass
    return total


def check_repo(folder: Path, scope=()) -> tuple:
    """(findings, problems, notes, seconds) of one run over a repository."""
    targets = [str(folder / s) for s in scope] if scope else [str(folder)]
    start = time.perf_counter()
    result = check_paths(targets)
    seconds = time.perf_counter() - start
    return result.findings, result.problems, getattr(result, "notes", []), seconds


def line_text(path: str, line: int) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace").splitlines()[line - 1]
    except (OSError, IndexError):
        return ""


def findings_rows(trees: Path, repos: list) -> tuple:
    rows, problems, timing = [], [], []
    for repo in repos:
        folder = trees / repo
        findings, found_problems, _, seconds = check_repo(folder)
        lines = python_lines(folder)
        timing.append((repo, lines, seconds))
        problems += [p for p in found_problems if "internal error" in p]
        for f in findings:
            rel = os.path.relpath(f.path, folder)
            text = line_text(f.path, f.line)
            judged, why = VERDICTS.get((repo, rel, f.code, text.strip()), ("unjudged", ""))
            rows.append(Row(repo, rel, f.line, f.code, text.strip(), judged, why))
    return rows, problems, timing


def run_injection(trees: Path, inj: Injection) -> tuple:
    """(caught, the new findings) for one injected bug, in a copy of its repository."""
    source = trees / inj.repo
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / inj.repo
        shutil.copytree(source, copy, ignore=shutil.ignore_patterns("*.png", "*.jpg", ".git"))
        before = _keys(copy, inj.scope)
        target = copy / inj.path
        text = target.read_text()
        if text.count(inj.old) != 1:
            count = text.count(inj.old)
            raise SystemExit(f"injection {inj.bug!r}: {inj.path} has its text {count}x")
        changed = text.replace(inj.old, inj.new)
        ast.parse(changed)
        target.write_text(changed)
        after = _keys(copy, inj.scope)
    new = sorted(after - before)
    return any(code in inj.codes for _, code, _ in new), new


def _keys(folder: Path, scope) -> set:
    findings, *_ = check_repo(folder, scope)
    return {
        (os.path.relpath(f.path, folder), f.code, line_text(f.path, f.line).strip())
        for f in findings
        if f.code != LOAD
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("trees", type=Path)
    parser.add_argument("--repos", help="comma-separated subfolders (default: every one)")
    parser.add_argument("--inject", action="store_true", help="also measure recall")
    parser.add_argument("--markdown", type=Path, help="write the tables to this file")
    args = parser.parse_args(argv)
    repos = (
        args.repos.split(",")
        if args.repos
        else sorted(p.name for p in args.trees.iterdir() if p.is_dir())
    )
    rows, problems, timing = findings_rows(args.trees, repos)
    loop = [r for r in rows if r.code != LOAD]
    for r in rows:
        print(f"{r.verdict:10} {r.repo}/{r.path}:{r.line} {r.code}  {r.text[:70]}  -- {r.why}")
    good = sum(r.verdict in (T, D) for r in loop)
    counts = {v: sum(r.verdict == v for r in loop) for v in (T, D, F, "unjudged")}
    precision = good / len(loop) if loop else 1.0
    lines = sum(n for _, n, _ in timing)
    seconds = sum(s for _, _, s in timing)
    print(f"\nloop-rule findings: {len(loop)} {counts}; precision {precision:.0%}")
    print(f"SCF2301 findings: {len(rows) - len(loop)}")
    print(f"internal errors: {len(problems)}")
    for p in problems:
        print("  ", p)
    print(f"{lines} lines in {seconds:.1f} s: {seconds / lines * 1e5:.2f} s per 100k lines")
    results = []
    if args.inject:
        for inj in INJECTIONS:
            if inj.repo not in repos:
                continue
            caught, new = run_injection(args.trees, inj)
            results.append((inj, caught, new))
            print(
                f"{'caught' if caught else 'MISSED'}  {inj.repo}/{inj.path}: {inj.bug}"
                f"  {sorted({c for _, c, _ in new})}"
            )
        found = sum(c for _, c, _ in results)
        print(f"\nrecall: {found}/{len(results)} = {found / max(len(results), 1):.0%}")
    if args.markdown:
        args.markdown.write_text(markdown(rows, counts, precision, problems, timing, results))
    return 0


def markdown(rows, counts, precision, problems, timing, results) -> str:
    loop = [r for r in rows if r.code != LOAD]
    lines = sum(n for _, n, _ in timing)
    seconds = sum(s for _, _, s in timing)
    out = [
        "# `scaffold check` on real repositories",
        "",
        f"Made {datetime.date.today().isoformat()} by `python benchmarks/check_corpus.py TREES "
        "--inject --markdown benchmarks/results/check_corpus.md` (TREES: the repositories below, "
        "fetched; how to make it is in the script's docstring).",
        "",
        f"- loop-rule findings: {len(loop)}: {counts[T]} true, {counts[D]} debatable, "
        f"{counts[F]} false, {counts['unjudged']} unjudged; **precision "
        f"{precision:.0%}** (true or debatable over all)",
        f"- `torch.load` without `weights_only` (SCF2301): {len(rows) - len(loop)}",
        f"- internal errors: {len(problems)}",
        f"- speed: {lines:,} lines in {seconds:.1f} s, {seconds / lines * 1e5:.2f} s per 100k "
        "lines (in process, 2-core machine)",
    ]
    if results:
        found = sum(c for _, c, _ in results)
        out.append(
            f"- injected bugs caught: **{found}/{len(results)} = {found / len(results):.0%}**"
        )
    out += ["", "## Repositories", "", "| repository | lines | seconds |", "|---|---|---|"]
    out += [f"| {r} | {n:,} | {s:.1f} |" for r, n, s in timing]
    out += [
        "",
        "## Every loop-rule finding",
        "",
        "| finding | code | line | verdict | why |",
        "|---|---|---|---|---|",
    ]
    for r in loop:
        text = r.text.replace("|", "\\|")[:80]
        out.append(f"| {r.repo}/{r.path}:{r.line} | {r.code} | `{text}` | {r.verdict} | {r.why} |")
    if results:
        out += [
            "",
            "## Injected bugs",
            "",
            "| script | bug | expected | caught | new findings |",
            "|---|---|---|---|---|",
        ]
        for inj, caught, new in results:
            got = ", ".join(sorted({c for _, c, _ in new})) or "none"
            out.append(
                f"| {inj.repo}/{inj.path} | {inj.bug} | {'/'.join(inj.codes)} | "
                f"{'yes' if caught else 'no'} | {got} |"
            )
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.exit(main())
