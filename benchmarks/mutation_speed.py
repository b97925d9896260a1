"""Mutants and equivalents a minute: the fork runner (tests/forkrun.py) against the old way (two
fresh interpreters a case, every loop test), side by side on the same cases, in one run.

    python benchmarks/mutation_speed.py [--mutants 16] [--equivalents 6] [--jobs 2]

The cases are spread evenly over the proof tier's (every task, with and without distributed);
each is run both ways, the old way first, with `--jobs` at once. Both ways must agree on the
outcome (caught or not; passes or not). Prints a markdown table; `--out` also writes it.
"""

import argparse
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests import equivalents, mutants  # noqa: E402
from tests.conftest import combo_id, render  # noqa: E402


def spread(cases: list, count: int) -> list:
    """`count` cases at even steps through the list (all of them if fewer)."""
    if count >= len(cases):
        return list(cases)
    return (
        [cases[round(i * (len(cases) - 1) / (count - 1))] for i in range(count)]
        if count > 1
        else cases[:1]
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mutants", type=int, default=16)
    parser.add_argument("--equivalents", type=int, default=6)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="mutation-speed-"))
    projects: dict = {}

    def project(options):
        if options not in projects:
            projects[options] = render(tmp / "projects" / f"p-{combo_id(options)}", options).dest
        return projects[options]

    chosen_mutants = spread(mutants.CASES, args.mutants)
    chosen_equivalents = spread(equivalents.CASES, args.equivalents)
    for options, _ in chosen_mutants + chosen_equivalents:
        project(options)

    def mutant_job(case, isolation, index):
        options, mutant = case
        dest = project(options)
        work = tmp / "work" / f"{isolation}-m{index}"
        outcome = mutants.run_mutant(
            dest, dest.name.replace("-", "_"), mutant, combo_id(options), work, isolation
        )
        return outcome.caught

    def equivalent_job(case, isolation, index):
        options, equivalent = case
        dest = project(options)
        work = tmp / "work" / f"{isolation}-e{index}"
        result = equivalents.run_equivalent(
            dest, dest.name.replace("-", "_"), equivalent, options, combo_id(options), work,
            None, isolation,
        )  # fmt: skip
        return result.passes

    rows, agree = [], True
    for name, job, cases in (
        ("mutants", mutant_job, chosen_mutants),
        ("equivalents", equivalent_job, chosen_equivalents),
    ):
        seconds, verdicts = {}, {}
        for isolation in ("subprocess", "fork"):
            started = time.perf_counter()
            with ThreadPoolExecutor(args.jobs) as pool:
                runs = [pool.submit(job, case, isolation, i) for i, case in enumerate(cases)]
                verdicts[isolation] = [run.result() for run in runs]
            seconds[isolation] = time.perf_counter() - started
        agree &= verdicts["subprocess"] == verdicts["fork"]
        per_minute = {k: 60 * len(cases) / v for k, v in seconds.items()}
        rows.append(
            f"| {name} | {len(cases)} | {per_minute['subprocess']:.1f} | {per_minute['fork']:.1f} "
            f"| {per_minute['fork'] / per_minute['subprocess']:.1f}x | "
            f"{'yes' if verdicts['subprocess'] == verdicts['fork'] else '**no**'} |"
        )
    mutants.forkrun.POOL.close()
    text = "\n".join(
        [
            f"{args.jobs} at once; a minute is wall-clock time on this machine.",
            "",
            "| suite | cases | a minute, subprocesses | a minute, fork runner | speed-up "
            "| same verdicts |",
            "|---|---|---|---|---|---|",
            *rows,
        ]
    )
    print(text)
    if args.out:
        args.out.write_text(
            f"# Mutation runner speed\n\n`python benchmarks/mutation_speed.py`\n\n{text}\n"
        )
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
