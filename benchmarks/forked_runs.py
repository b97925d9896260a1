"""The proof tier's wider renders: their import check and three-epoch run in a fresh interpreter
against a fork of one that imported torch once (tests/forkrun.py), side by side, in one run.

    python benchmarks/forked_runs.py [--renders 6] [--out benchmarks/results/forked_runs.md]

The renders are the proof tier's wider ones without compile (whose run trains eager there),
taken a task at a time in turn. Each is checked both ways, in alternating order, with the
commands the tests run (tests/test_render.py's IMPORT_ALL; `python -m PACKAGE.train --epochs
3`); both ways must succeed and train the same epochs to the same losses. Prints a markdown
table; `--out` also writes it.
"""

import argparse
import csv
import datetime
import itertools
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests import forkrun  # noqa: E402
from tests.conftest import (  # noqa: E402
    COVERING,
    PYTHON,
    TASKS,
    TRIPLES,
    combo_id,
    project_env,
    render,
    run,
)
from tests.test_render import IMPORT_ALL  # noqa: E402


def in_turn(options: list, count: int) -> list:
    """The first `count` of `options` taking a task at a time in turn."""
    by_task = [[o for o in options if o.task == task] for task in TASKS]
    return [o for group in itertools.zip_longest(*by_task) for o in group if o][:count]


def commands(package: str) -> dict[str, list[str]]:
    return {
        "import check": ["-c", IMPORT_ALL, package],
        "3-epoch run": ["-m", f"{package}.train", "--epochs", "3", "--out", "run", "--seed", "7"],
    }


def timed(way: str, argv: list[str], project: Path) -> tuple[float, str]:
    shutil.rmtree(project / "run", ignore_errors=True)
    started = time.perf_counter()
    if way == "fresh":
        done = run([PYTHON, *argv], project, env=project_env())
    else:
        env = {"PYTHONPATH": "src", "OMP_NUM_THREADS": "1"}
        done = forkrun.run_python(argv, project, env=env)
    seconds = time.perf_counter() - started
    assert done.returncode == 0, f"{way} {argv[:2]}: {done.stderr[-2000:]}"
    losses = ""
    if (project / "run" / "metrics.csv").exists():
        with open(project / "run" / "metrics.csv", newline="") as f:
            losses = " ".join(row["train_loss"] for row in csv.DictReader(f))
    return seconds, losses


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--renders", type=int, default=6)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    wider = [o for o in TRIPLES if o not in COVERING and not o.compile]
    chosen = in_turn(wider, args.renders)
    tmp = Path(tempfile.mkdtemp(prefix="forked-runs-"))
    forkrun.run_python(["-c", "pass"], tmp)  # the server's start, paid once by the tier
    times: dict = {}
    for index, options in enumerate(chosen):
        project = render(tmp / f"p-{combo_id(options)}", options).dest
        package = project.name.replace("-", "_")
        for name, argv_ in commands(package).items():
            ways = ("fresh", "forked") if index % 2 == 0 else ("forked", "fresh")
            results = {way: timed(way, argv_, project) for way in ways}
            assert results["fresh"][1] == results["forked"][1], (combo_id(options), results)
            for way, (seconds, _) in results.items():
                times.setdefault(name, {}).setdefault(way, []).append(seconds)
    shutil.rmtree(tmp, ignore_errors=True)

    lines = [
        "# Wider renders: fresh interpreter vs fork",
        "",
        f"{datetime.date.today()}, {len(chosen)} wider renders: "
        + ", ".join(f"`{combo_id(o)}`" for o in chosen)
        + ". Medians in seconds, one at a time; both ways trained the same losses.",
        "",
        "Command: `python benchmarks/forked_runs.py " + " ".join(argv or sys.argv[1:]) + "`",
        "",
        "| run | fresh interpreter | forked | forked / fresh |",
        "|---|---|---|---|",
    ]
    for name, ways in times.items():
        fresh, forked = statistics.median(ways["fresh"]), statistics.median(ways["forked"])
        lines.append(f"| {name} | {fresh:.2f} | {forked:.2f} | {forked / fresh:.2f} |")
    table = "\n".join(lines) + "\n"
    print(table)
    if args.out:
        args.out.write_text(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
