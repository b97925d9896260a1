"""How fast `scaffold check` reads a repository: N training files made from the check corpus.

    python benchmarks/check_speed.py              # 300 files
    python benchmarks/check_speed.py --files 1000 --repeat 5

Each file is a corpus loop (tests/check_corpus/) with its names changed, a few of its tagged
lines moved (so some files have findings, as a real repository might), and some unrelated
code around it, spread over folders of ten. Prints files/s for check_paths in this process and
for the whole command, interpreter start included; the best of --repeat runs counts.
"""

import argparse
import ast
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO / "tests" / "check_corpus"
NAMES = ("model", "optimizer", "loader", "scheduler", "loss")

FILLER = '''

def summary_{k}(rows, width={width}):
    """Unrelated code, as training repositories carry around their loops."""
    out = []
    for i, row in enumerate(rows):
        if i % width == 0:
            out.append(", ".join(str(v) for v in row))
    return {{"rows": len(rows), "kept": out}}
'''


def make_files(folder: Path, count: int, seed: int = 0) -> list[Path]:
    """`count` varied training files under `folder`, ten to a subfolder."""
    rng = random.Random(seed)
    sources = [p.read_text() for p in sorted(CORPUS.glob("*.py"))]
    made = []
    for k in range(count):
        text = sources[k % len(sources)]
        for name in rng.sample(NAMES, 2):
            text = re.sub(rf"\b{name}\b", f"{name}_{k}", text)
        if rng.random() < 0.3:
            text = _swap_tagged_lines(text, rng)
        text += "".join(FILLER.format(k=f"{k}_{j}", width=j + 2) for j in range(rng.randint(1, 4)))
        path = folder / f"pkg{k // 10:03d}" / f"train_{k:04d}.py"
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
        made.append(path)
    return made


def _swap_tagged_lines(text: str, rng: random.Random) -> str:
    """Two tagged lines of one indentation exchanged: a loop bug, most of the time; the text
    as it was when the swap would not parse (a block's header moved)."""
    lines = text.splitlines(keepends=True)
    tagged = [i for i, line in enumerate(lines) if re.search(r"# \[\w+\]\s*$", line)]
    by_indent = {}
    for i in tagged:
        by_indent.setdefault(len(lines[i]) - len(lines[i].lstrip()), []).append(i)
    groups = [g for g in by_indent.values() if len(g) > 1]
    if groups:
        a, b = rng.sample(rng.choice(groups), 2)
        lines[a], lines[b] = lines[b], lines[a]
    swapped = "".join(lines)
    try:
        ast.parse(swapped)
    except SyntaxError:
        return text
    return swapped


def time_in_process(folder: Path, repeat: int) -> tuple[float, int, int]:
    from scaffold.check.run import check_paths

    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        result = check_paths([str(folder)])
        best = min(best, time.perf_counter() - start)
    return best, result.files, len(result.findings)


def time_command(folder: Path, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        run = subprocess.run(
            [sys.executable, "-m", "scaffold", "check", str(folder)],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
        best = min(best, time.perf_counter() - start)
        if run.returncode not in (0, 1):  # a crash would time as fast
            sys.exit(f"scaffold check failed: {run.stderr.strip().splitlines()[-1:]}")
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=300, help="files to generate (300)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each timing (3)")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    with tempfile.TemporaryDirectory(prefix="check-speed-") as tmp:
        folder = Path(tmp)
        made = make_files(folder, args.files)
        lines = sum(p.read_text().count("\n") for p in made)
        seconds, files, findings = time_in_process(folder, args.repeat)
        wall = time_command(folder, args.repeat)
    print(f"{files} files, {lines} lines, {findings} findings")
    print(f"check_paths: {seconds:.3f} s, {files / seconds:.0f} files/s")
    print(f"scaffold check (interpreter start included): {wall:.3f} s, {files / wall:.0f} files/s")


if __name__ == "__main__":
    main()
