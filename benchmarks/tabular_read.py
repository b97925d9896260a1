"""Reading a table: the old csv-module reader against the generated Arrow reader.

    python benchmarks/tabular_read.py                   # 100k and 1M rows x 20 features
    python benchmarks/tabular_read.py --rows 10000000   # other sizes (default: 100000 1000000)
    python benchmarks/tabular_read.py --threads 1 2     # thread counts of the new readers
                                                        # (default: 1 and every CPU)
    python benchmarks/tabular_read.py --quick           # seconds: checks the code still works

The files (a numeric CSV, a Parquet copy, and a mixed CSV and Parquet pair with text columns
and missing cells) are generated in a temporary folder and deleted afterwards. Each reading
runs in a fresh interpreter that has imported torch, pyarrow and the project first; its peak
RSS is VmHWM after reading minus the RSS before it (Linux: the peak is reset to the RSS first,
so that a passing peak of the imports hides nothing), and its peak anonymous memory
(RssAnon, sampled every 2 ms: what the OS cannot drop, unlike the pages of a mapped file) over
the same. Results go to benchmarks/results/tabular_read.md.
"""

import argparse
import contextlib
import csv
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from array import array
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FEATURES = 20
TEXT_COLUMNS = {"city": 12, "shop": 400, "product": 5000}  # name: distinct values
MISSING_SHARE = 0.05  # of the cells of the first 5 numeric columns, in the mixed files
READERS = {
    "old: csv module, row by row": ("old", ".csv"),
    "new: Arrow, CSV": ("new", ".csv"),
    "new: Arrow, Parquet": ("new", ".parquet"),
    "new: Arrow, CSV, into a memory-mapped file (memory_budget_mb 0)": ("disk", ".csv"),
    "new: Arrow, CSV, mixed (3 text columns, 5% missing cells in 5)": ("new", ".mixed.csv"),
    "new: Arrow, Parquet, mixed": ("new", ".mixed.parquet"),
    "reference: pyarrow.csv.read_csv alone": ("arrow", ".csv"),
}


# ---------------------------------------------------------------------------------------------
# The baseline: the generated read_csv before Arrow (scaffold 8cf0071), its checks included.

MAX_LINE_CHARS = 1 << 20
FLOAT32_MAX = 3.4028234663852886e38


def old_read_csv(path: str, target: str, parse_target, empty_targets):
    """The numeric features and parsed targets of a CSV file, one csv.reader row at a time."""
    with open(path, encoding="utf-8-sig", errors="surrogateescape", newline="") as f:
        reader = csv.reader(_lines(f))
        header = [name.strip() for name in next(reader)]
        t = header.index(target)
        columns = [i for i in range(len(header)) if i != t]
        features, targets, lines = array("f"), empty_targets(), array("q")
        for row in reader:
            if not row:
                continue
            if len(row) != len(header):
                raise ValueError(f"{path}:{reader.line_num}: {len(row)} fields")
            for i in columns:
                value = float(row[i])
                if not -FLOAT32_MAX <= value <= FLOAT32_MAX:
                    raise ValueError(f"{path}:{reader.line_num}: not a finite float32")
                features.append(value)
            lines.append(reader.line_num)
            targets.append(parse_target(row[t]))
    import torch

    matrix = torch.frombuffer(features, dtype=torch.float32).view(len(lines), len(columns))
    return matrix, targets, [header[i] for i in columns]


def _lines(f):
    for line in iter(lambda: f.readline(MAX_LINE_CHARS + 1), ""):
        if len(line) > MAX_LINE_CHARS:
            raise ValueError("line too long")
        if not line.isascii():
            line.encode("utf-8")
        yield line


# ---------------------------------------------------------------------------------------------
# One reading, in a fresh interpreter (the parent runs this file with --child).


def _rss() -> int:
    """The resident memory now, in bytes."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss() -> int:
    """The process's peak resident memory (VmHWM), in bytes. Not ru_maxrss: that also keeps
    the peak of the process before exec, a copy of the parent (large once it made the files)."""
    with open("/proc/self/status") as f:
        line = next(line for line in f if line.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


def _anonymous() -> int:
    """The process's anonymous resident memory now (RssAnon), in bytes."""
    with open("/proc/self/status") as f:
        line = next(line for line in f if line.startswith("RssAnon:"))
    return int(line.split()[1]) * 1024


class AnonymousPeak(threading.Thread):
    """The largest RssAnon seen while it runs, sampled every 2 ms."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak, self.done = _anonymous(), threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.002):
            self.peak = max(self.peak, _anonymous())

    def stop(self) -> int:
        self.done.set()
        self.join()
        return max(self.peak, _anonymous())


def child(reader: str, path: str, src: str, package: str) -> None:
    sys.path.insert(0, src)
    import importlib

    import pyarrow.compute  # noqa: F401  (imported on first use otherwise: 0.2 s once)
    import pyarrow.csv
    import torch

    tables = importlib.import_module(f"{package}.tables")  # the CSV and Parquet reader
    task = importlib.import_module(f"{package}.task")
    storage = importlib.import_module(f"{package}.storage").Storage(0, Path(path).parent)
    # The peak so far may be a passing one of the imports: reset it to the RSS now (Linux).
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")
    before, anonymous = _rss(), AnonymousPeak()
    anonymous_before = anonymous.peak
    anonymous.start()
    start = time.perf_counter()
    if reader == "old":
        features, targets, _ = old_read_csv(path, "target", task.parse_target, task.empty_targets)
    elif reader == "arrow":  # the parser alone: a table of inferred types, no checks, no matrix
        table = pyarrow.csv.read_csv(path)
        features, targets = torch.empty(table.num_rows, FEATURES), range(table.num_rows)
    else:
        matrix = storage.matrix if reader == "disk" else tables.in_memory
        table = tables.read_table(path, "target", matrix=matrix)
        features, targets = table.features, table.targets
    seconds = time.perf_counter() - start
    anonymous_peak = anonymous.stop() - anonymous_before
    after = peak_rss()
    rows = len(targets)
    # The final tensors: the float32 features and one int64 class index per row.
    final = features.numel() * 4 + rows * 8
    peak = after - before
    result = {"seconds": seconds, "rows": rows, "peak": peak, "final": final}
    print(json.dumps({**result, "anonymous": anonymous_peak}))


# ---------------------------------------------------------------------------------------------
# The parent: render a project, write the files, run every reading in its own process.


def write_files(folder: Path, rows: int) -> dict[str, Path]:
    """A numeric CSV file of rows x FEATURES float32 values and 4 classes, its Parquet copy,
    and a mixed pair: the same with TEXT_COLUMNS and missing cells."""
    import numpy as np
    import pyarrow as pa
    from pyarrow import csv as arrow_csv
    from pyarrow import parquet

    rng = np.random.default_rng(rows)
    batches, mixed = [], []
    for start in range(0, rows, 1_000_000):  # a million rows at a time keeps the parent small
        n = min(1_000_000, rows - start)
        values = rng.standard_normal((n, FEATURES), dtype=np.float32)
        columns = {f"x{j}": values[:, j] for j in range(FEATURES)}
        columns["target"] = rng.integers(0, 4, n)
        batches.append(pa.table(columns))
        for j in range(5):
            missing = rng.random(n) < MISSING_SHARE
            columns[f"x{j}"] = pa.array(values[:, j], mask=missing)
        for name, distinct in TEXT_COLUMNS.items():
            names = np.array([f"{name} {i}" for i in range(distinct)])
            columns[name] = names[rng.zipf(1.3, n) % distinct]
        mixed.append(pa.table(columns))
    paths = {suffix: folder / f"{rows}{suffix}" for suffix in (".csv", ".parquet")}
    paths |= {suffix: folder / f"{rows}{suffix}" for suffix in (".mixed.csv", ".mixed.parquet")}
    for tables, csv_path, parquet_path in [
        (batches, paths[".csv"], paths[".parquet"]),
        (mixed, paths[".mixed.csv"], paths[".mixed.parquet"]),
    ]:
        with arrow_csv.CSVWriter(csv_path, tables[0].schema) as writer:
            for table in tables:
                writer.write_table(table)
        parquet.write_table(pa.concat_tables(tables), parquet_path)
    return paths


def measure(reader: str, path: Path, src: Path, package: str, threads: int) -> dict:
    command = [sys.executable, __file__, "--child", reader, str(path), str(src), package]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    result = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stderr}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--repetitions", type=int, default=3, help="median of this many")
    parser.add_argument(
        "--threads",
        type=int,
        nargs="+",
        default=sorted({1, os.cpu_count() or 1}),
        help="OMP_NUM_THREADS of the new readers (the old one has one thread)",
    )
    parser.add_argument("--quick", action="store_true", help="2000 rows, one repetition")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args(argv)
    sizes, repetitions = ([2000], 1) if args.quick else (args.rows, args.repetitions)
    sys.path.insert(0, str(REPO))
    from scaffold.options import Options, project_names
    from scaffold.render import render_project

    lines = [
        "| rows | reader | threads | seconds | rows/s | speed-up | peak RSS (MB) "
        "| peak / final tensors | peak anonymous (MB) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        dest = tmp / "bench-read"
        render_project(dest, *project_names(str(dest)), Options(task="classification"))
        src, package = dest / "src", "bench_read"
        for rows in sizes:
            paths = write_files(tmp, rows)
            readings = [
                (name, threads)
                for name, (reader, _) in READERS.items()
                for threads in ([1] if reader == "old" else args.threads)
            ]
            results: dict[tuple, list[dict]] = {reading: [] for reading in readings}
            for _ in range(repetitions):  # interleaved: the machine's drift hits every reader
                for name, threads in readings:
                    reader, suffix = READERS[name]
                    run = measure(reader, paths[suffix], src, package, threads)
                    results[name, threads].append(run)
            old = statistics.median(r["seconds"] for r in results[readings[0]])
            size = f"{rows:,} ({paths['.csv'].stat().st_size / 1e6:.0f} MB CSV)"
            for (name, threads), runs in results.items():
                seconds = statistics.median(r["seconds"] for r in runs)
                peak = statistics.median(r["peak"] for r in runs)
                anonymous = statistics.median(r["anonymous"] for r in runs)
                final = runs[0]["final"]
                lines.append(
                    f"| {size} | {name} | {threads} | {seconds:.2f} | {rows / seconds:,.0f} | "
                    f"{old / seconds:.1f}x | {peak / 1e6:.0f} | {peak / final:.2f} | "
                    f"{anonymous / 1e6:.0f} |"
                )
                print(lines[-1], flush=True)
            for path in paths.values():
                path.unlink()

    import pyarrow
    import torch

    command = " ".join(["python", "benchmarks/tabular_read.py", *(argv or sys.argv[1:])])
    report = [
        f"# Reading a table ({datetime.date.today().isoformat()})",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.system()}; "
        f"Python {platform.python_version()}; torch {torch.__version__}; "
        f"pyarrow {pyarrow.__version__}",
        f"Command: {command}; median of {repetitions} interleaved repetitions.",
        "",
        f"Files: {FEATURES} float32 feature columns and an integer class column (4 classes), "
        "written by Arrow (CSV) and as a Parquet copy; the mixed pair adds 3 text columns "
        f"({', '.join(f'{n} values' for n in TEXT_COLUMNS.values())}, Zipf-distributed) and "
        f"leaves {MISSING_SHARE:.0%} of the cells of 5 numeric columns empty. "
        "Each reading runs in a fresh process "
        "with torch, pyarrow and the project imported; peak RSS is VmHWM after reading "
        "minus the RSS before it (the peak reset to it first), and the last column divides it "
        "by the final tensors (float32 "
        "features, int64 class indices). Old: the generated read_csv before Arrow (the csv "
        "module, a float() per cell); new: read_table of a classification project rendered "
        "from this repository (Arrow's C++ parser, float32 columns copied into one matrix). "
        "Speed-up: the old reader's seconds over each reader's. The reference row is "
        "pyarrow.csv.read_csv alone with its defaults (types inferred: float64 and int64; "
        "the whole table in memory; no checks, no matrix). Threads: each reading runs with "
        "OMP_NUM_THREADS set to it, which the new CSV reader follows (it parses pieces of the "
        "file in torch.get_num_threads() threads), as do Arrow's thread pool and the "
        "reference; the old reader has one. Peak anonymous: "
        "the largest RssAnon during the reading over RssAnon before it; the pages of a "
        "memory-mapped file are not anonymous (the OS writes them back and drops them under "
        "memory pressure), so it is the memory the disk path cannot give back.",
        "",
        *lines,
        "",
    ]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "tabular_read.md").write_text("\n".join(report))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(*sys.argv[2:6])
    else:
        sys.exit(main())
