"""Training curves of one or more runs as a PNG: losses, validation metrics, learning rate."""

import argparse
import csv
import importlib.util
import io
import math
import os
import stat
import sys
from pathlib import Path

from .checkpoint import write_atomically

EXIT_INPUT = 2  # a run folder or --out that cannot be used, or matplotlib missing
MISSING_MATPLOTLIB = 'plotting needs matplotlib: pip install -e ".[plot]"'
EXIT_INTERRUPTED = 130  # Ctrl-C
COLUMNS = ("epoch", "lr", "train_loss", "val_loss")  # what every panel but the metrics' reads


class PlotError(ValueError):
    """A run folder, an output path or a package that keeps the curves from being drawn."""


def read_history(run: str | Path) -> list[dict[str, float]]:
    """The rows of a run's metrics.csv, as numbers."""
    path = Path(run) / "metrics.csv"
    try:
        # A pipe or a device would block or never end: only a regular file is read.
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise PlotError(f"{path} is not a regular file; give a folder a training run wrote")
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except FileNotFoundError:
        raise PlotError(f"{run} has no metrics.csv; give a folder a training run wrote") from None
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise PlotError(f"cannot read {path}: {err}") from None
    if not rows or "epoch" not in rows[0]:
        raise PlotError(f"{path} holds no epochs; give a folder a training run wrote")
    lacking = [name for name in COLUMNS if name not in rows[0]]
    if lacking:
        raise PlotError(
            f"{path} has no {', '.join(lacking)} column; give a folder a training run wrote"
        )
    try:
        return [{key: float(value) for key, value in row.items()} for row in rows]
    except (TypeError, ValueError):
        raise PlotError(f"{path} has a value that is not a number; was it edited?") from None


def have_matplotlib() -> bool:
    """Whether the plot extra is installed, found without importing it."""
    return importlib.util.find_spec("matplotlib") is not None


def panels(histories: list[list[dict[str, float]]]) -> list[str]:
    """What each panel shows: the losses, each validation metric any run has, the rate."""
    metrics = []
    for history in histories:
        for key in history[0]:
            if key.startswith("val_") and key != "val_loss" and key not in metrics:
                metrics.append(key)
    return ["loss", *metrics, "lr"]


def render_curves(runs: list[str | Path]) -> bytes:
    """The PNG of every run's curves, one colour per run, drawn without a display."""
    try:
        import matplotlib  # noqa: F401  (the plot extra is optional: a clear line without it)
    except ImportError:
        raise PlotError(MISSING_MATPLOTLIB) from None
    # Agg draws into memory: no window, no display, nothing set globally as pyplot would.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    histories = [read_history(run) for run in runs]
    names = panels(histories)
    columns = 2 if len(names) == 4 else min(len(names), 3)
    rows = math.ceil(len(names) / columns)
    width, height = 5.0 * columns, 3.6 * rows + 0.6  # inches
    figure = Figure(figsize=(width, height))
    FigureCanvasAgg(figure)
    # Margins in inches, fixed: a layout engine would draw the figure twice, at twice the time.
    figure.subplots_adjust(
        left=0.75 / width,
        right=1 - 0.2 / width,
        bottom=0.5 / height,
        top=1 - 0.8 / height,
        wspace=0.25,
        hspace=0.45,
    )
    axes = figure.subplots(rows, columns, squeeze=False).flatten()
    for ax in axes[len(names) :]:
        ax.set_visible(False)

    for index, history in enumerate(histories):
        colour = f"C{index % 10}"
        epochs = [row["epoch"] for row in history]
        style = {"color": colour, "marker": "o", "markersize": 3}
        for ax, name in zip(axes, names, strict=False):
            if name == "loss":
                ax.plot(epochs, [row["train_loss"] for row in history], linestyle="--", **style)
                ax.plot(epochs, [row["val_loss"] for row in history], **style)
                best = min(history, key=lambda row: row["val_loss"])
                ax.plot(best["epoch"], best["val_loss"], "*", color=colour, markersize=12)
            elif name in history[0]:
                ax.plot(epochs, [row[name] for row in history], **style)

    titles = {"loss": "loss (* best validation epoch)", "lr": "learning rate"}
    for ax, name in zip(axes, names, strict=False):
        ax.set_title(titles.get(name, "validation " + name.removeprefix("val_")))
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(True, alpha=0.3)
    axes[names.index("lr")].ticklabel_format(axis="y", style="sci", scilimits=(-2, 3))
    axes[0].legend(
        [Line2D([], [], color="black", linestyle="--"), Line2D([], [], color="black")],
        ["training", "validation"],
    )
    # One colour per run, named by its folder as given.
    figure.legend(
        [Line2D([], [], color=f"C{i % 10}", linewidth=3) for i in range(len(runs))],
        [str(run) for run in runs],
        loc="upper center",
        ncols=min(len(runs), 4),
    )
    png = io.BytesIO()
    figure.savefig(png, format="png", dpi=100)
    return png.getvalue()


def write_curves(runs: list[str | Path], out: str | Path) -> None:
    """Draw the runs' curves into the PNG file `out`, replaced whole or not at all."""
    png = render_curves(runs)
    try:
        write_atomically(out, lambda f: f.write(png), fsync=False)
    except OSError as err:
        raise PlotError(f"cannot write {out}: {err.strerror}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"python -m {__package__}.plot",
        description="Draw the training curves of one or more runs into one PNG, to compare them.",
    )
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR", help="folders holding metrics.csv")
    parser.add_argument(
        "--out", metavar="PNG", default="curves.png", help="image to write (default curves.png)"
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    return parser


def check_output(out: str, overwrite: bool, runs: list[str]) -> None:
    """Refuse an --out whose writing would lose a file: an existing one without --overwrite,
    and, even with it, anything but a regular file, or a run's own metrics.csv."""
    path = Path(out)
    if out.endswith(("/", os.sep)) or path.is_dir():
        raise PlotError(f"--out {out} is a folder; give a file name such as curves.png")
    if os.path.lexists(path):
        if not overwrite:
            raise PlotError(f"--out {path} exists; choose another file or add --overwrite")
        if path.is_symlink() or not path.is_file():
            raise PlotError(f"--out {path} is not a regular file; choose another --out")
        for run in runs:
            metrics = Path(run) / "metrics.csv"
            if metrics.exists() and os.path.samefile(metrics, path):
                raise PlotError(f"--out {path} is the input {metrics}; choose another --out")
    if not path.parent.is_dir():
        raise PlotError(f"--out {path}: folder {path.parent} does not exist")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        check_output(args.out, args.overwrite, args.runs)
        write_curves(args.runs, args.out)
    except PlotError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        print("interrupted; nothing was written", file=sys.stderr)
        return EXIT_INTERRUPTED
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
