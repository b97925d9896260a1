"""A real-sized table end to end: train on 1M mixed rows from CSV, Parquet and from disk, predict.

    python benchmarks/tabular_fit.py                 # 1,000,000 rows, 2 epochs (about 5 minutes)
    python benchmarks/tabular_fit.py --rows 200000   # another size
    python benchmarks/tabular_fit.py --quick         # 5000 rows: checks the code still works

The table (tabular_read.py's mixed pair: 20 numeric columns, 5 with 5% missing cells, 3 text
columns of 12, 400 and 5000 values, 4 classes) is generated in a temporary folder. A
classification project rendered from this repository trains on it from the command line, as a
user would: from the CSV file, from its Parquet copy, and from the CSV file with the disk path
forced (memory_budget_mb 0). Each run is a fresh process; its peak RSS and peak anonymous
memory are measured in it. Then predict reads a new file with unseen categories and missing
cells. Results go to benchmarks/results/tabular_fit.md.
"""

import argparse
import csv
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tabular_read import AnonymousPeak, peak_rss, write_files  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
PACKAGE = "bench_fit"
RUNS = {  # name: (file suffix, settings)
    "CSV, in memory": (".mixed.csv", []),
    "Parquet, in memory": (".mixed.parquet", []),
    "CSV, memory-mapped from disk (memory_budget_mb 0)": (".mixed.csv", ["memory_budget_mb=0"]),
}


def child(module: str, argv: list[str]) -> None:
    """Run the project's train or predict main in this process and report its memory."""
    import importlib

    main = importlib.import_module(f"{PACKAGE}.{module}").main
    anonymous = AnonymousPeak()
    anonymous.start()
    start = time.perf_counter()
    code = main(argv)
    seconds = time.perf_counter() - start
    peak = peak_rss()
    print(json.dumps({"code": code, "seconds": seconds, "peak": peak, "anon": anonymous.stop()}))


def run_child(src: Path, module: str, argv: list[str], threads: int) -> tuple[dict, str]:
    command = [sys.executable, __file__, "--child", module, *argv]
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": str(threads)}
    result = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    report = json.loads(lines[-1])
    if report["code"] != 0:
        raise SystemExit(f"{' '.join(command)} exited {report['code']}:\n{result.stderr[-3000:]}")
    return report, "\n".join(lines[:-1])


def epoch_seconds(output: str) -> list[float]:
    """The seconds of each epoch, from the epoch lines (each ends with the epoch's time, e.g.
    '12.34s', and a '*' when it improved)."""
    return [float(m[1]) for m in re.finditer(r"^epoch .* (\d+\.\d+)s(?:  \*)?$", output, re.M)]


def last_metrics(out: Path) -> dict:
    with open(out / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))[-1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2, help="OMP_NUM_THREADS of each run")
    parser.add_argument("--quick", action="store_true", help="5000 rows, 1 epoch")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args(argv)
    command = " ".join(
        ["python", "benchmarks/tabular_fit.py", *(sys.argv[1:] if argv is None else argv)]
    )
    rows, epochs = (5000, 1) if args.quick else (args.rows, args.epochs)
    sys.path.insert(0, str(REPO))
    from scaffold.options import Options, project_names
    from scaffold.render import render_project

    lines = [
        "| data | seconds (whole run) | seconds per epoch | last val_loss | val_accuracy "
        "| peak RSS (MB) | peak anonymous (MB) |",
        "|---|---|---|---|---|---|---|",
    ]
    said = {}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        dest = tmp / "bench-fit"
        render_project(dest, *project_names(str(dest)), Options(task="classification"))
        src = dest / "src"
        started = time.perf_counter()
        paths = write_files(tmp, rows)
        print(f"wrote the files in {time.perf_counter() - started:.0f} s", flush=True)
        metrics = {}
        for name, (suffix, settings) in RUNS.items():
            out = tmp / f"run{len(metrics)}"
            train = ["--data", str(paths[suffix]), "--epochs", str(epochs), "--out", str(out)]
            train += ["--set", "batch_size=1024", "--no-progress"]
            for setting in settings:
                train += ["--set", setting]
            report, output = run_child(src, "train", train, args.threads)
            said[name] = [line for line in output.splitlines() if line.startswith("data:")]
            metrics[name] = last_metrics(out)
            per_epoch = epoch_seconds(output)
            lines.append(
                f"| {name} | {report['seconds']:.1f} | "
                f"{', '.join(f'{s:.1f}' for s in per_epoch)} | "
                f"{float(metrics[name]['val_loss']):.4f} | "
                f"{float(metrics[name]['val_accuracy']):.4f} | {report['peak'] / 1e6:.0f} | "
                f"{report['anon'] / 1e6:.0f} |"
            )
            print(lines[-1], flush=True)
        same = metrics["CSV, in memory"] == metrics[list(RUNS)[2]]
        # New rows: the mixed file's first 10,000 (or fewer), with a category no run has seen.
        new = tmp / "new.csv"
        with open(paths[".mixed.csv"], newline="") as f, open(new, "w", newline="") as g:
            reader, writer = csv.reader(f), csv.writer(g)
            header = next(reader)
            writer.writerow(header)
            for i, row in zip(range(min(rows, 10_000)), reader, strict=False):
                if i % 100 == 0:
                    row[header.index("city")] = "a city never seen"
                writer.writerow(row)
        predict = ["--checkpoint", str(tmp / "run0" / "best.pt"), "--data", str(new)]
        predict += ["--out", str(tmp / "predictions.csv")]
        report, _ = run_child(src, "predict", predict, args.threads)
        with open(tmp / "predictions.csv", newline="") as f:
            predicted = sum(1 for _ in csv.DictReader(f))
        size = paths[".mixed.csv"].stat().st_size / 1e6

    import torch

    report_lines = [
        f"# Training on a mixed table end to end ({datetime.date.today().isoformat()})",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.system()}; "
        f"Python {platform.python_version()}; torch {torch.__version__}",
        f"Command: {command}",
        "",
        f"{rows:,} rows ({size:.0f} MB of CSV): 20 numeric columns (5 with 5% missing cells), "
        "3 text columns (12, 400 and 5000 values, Zipf-distributed), 4 classes drawn at random "
        "(nothing to learn: the figures are speed and memory, and the loss stays near ln 4). "
        f"A classification project trains {epochs} epochs at batch_size 1024 from the command "
        f"line, OMP_NUM_THREADS={args.threads}, each run in a fresh process.",
        "",
        *lines,
        "",
        "What the runs printed of the data:",
        "",
        *[f"- {name}: " + " / ".join(text) for name, text in said.items()],
        "",
        f"The disk path's metrics.csv equals the memory path's: {same}.",
        f"predict on {predicted:,} new rows (1% with a city never seen, missing cells kept): "
        f"{report['seconds']:.1f} s, peak RSS {report['peak'] / 1e6:.0f} MB.",
        "",
    ]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "tabular_fit.md").write_text("\n".join(report_lines))
    print("\n".join(report_lines[-4:]))
    return 0 if same and predicted == min(rows, 10_000) else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], sys.argv[3:])
    else:
        sys.exit(main())
