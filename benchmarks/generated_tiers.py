"""How long a generated project's own test tiers take on one core: `pytest` (the default tier,
target a minute) and `pytest -m probe`, for each combination of the covering set.

    python benchmarks/generated_tiers.py [--probes] [--combos N] [--out results/generated_tiers.md]

Each project is rendered fresh and its tiers run one after the other, alone, with
OMP_NUM_THREADS=1, as a user's `python -m pytest -q` on one core would. Nothing else should run
meanwhile.
"""

import argparse
import datetime
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.conftest import COVERING, combo_id, render  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def timed(project: Path, marks: list[str]) -> tuple[float, str]:
    env = {**os.environ, "PYTHONPATH": "src", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *marks]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-200:]
    summary = re.sub(r" in [\d.]+s.*", "", summary.strip("= "))
    return seconds, summary if done.returncode == 0 else f"**failed**: {summary}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probes", action="store_true", help="time `pytest -m probe` too")
    parser.add_argument("--combos", type=int, default=len(COVERING))
    parser.add_argument("--out", type=Path, default=RESULTS / "generated_tiers.md")
    args = parser.parse_args(argv)

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for options in COVERING[: args.combos]:
            project = render(Path(tmp) / f"t-{combo_id(options)}", options).dest
            row = [f"`{combo_id(options)}`"]
            for marks in ([], ["-m", "probe"]) if args.probes else ([],):
                seconds, summary = timed(project, marks)
                row += [f"{seconds:.0f} s", summary]
            rows.append("| " + " | ".join(row) + " |")
            print(rows[-1], flush=True)
    head = "| combination | `pytest` | tests |" + (" `-m probe` | tests |" if args.probes else "")
    text = "\n".join(
        [
            f"# Generated projects' test tiers, one core\n\n{datetime.date.today()}, "
            f"`python benchmarks/generated_tiers.py{' --probes' if args.probes else ''}` "
            "(wall-clock seconds of `python -m pytest -q`, OMP_NUM_THREADS=1, one at a time).",
            "",
            head,
            "|---|---|---|" + ("---|---|" if args.probes else ""),
            *rows,
        ]
    )
    args.out.write_text(text + "\n")
    print(text)
    return 0 if "**failed**" not in text else 1


if __name__ == "__main__":
    sys.exit(main())
