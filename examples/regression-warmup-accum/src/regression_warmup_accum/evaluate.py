"""Measure a trained model on labelled data: the run's metrics, and a confusion matrix."""

import argparse
import json
import sys
from pathlib import Path

import torch

from .checkpoint import CheckpointError, load_checkpoint, output_closed, write_atomically
from .config import ConfigError
from .data import DataError
from .engine import evaluate
from .predict import EXIT_INPUT, Predictor, check_output, load_predictor
from .task import METRICS


def evaluate_data(predictor: Predictor, data: str | Path) -> dict:
    """The loss and METRICS on labelled data, computed as validation computes them in training.

    For a task with classes, also the confusion matrix: rows are the true classes, columns the
    predicted ones, in the order of "classes".
    """
    _, split = predictor.inputs.read(str(data), predictor.task, labelled=True)
    metrics = evaluate(predictor.model, predictor.batches(split), predictor.task)
    report = {"samples": len(split), **metrics}
    classes = getattr(predictor.task, "classes", None)
    if classes is not None:
        outputs, targets = predictor.run(split)
        pairs = targets * len(classes) + outputs.argmax(dim=1)
        matrix = torch.bincount(pairs, minlength=len(classes) ** 2).view(len(classes), -1)
        report["classes"] = list(classes)
        report["confusion"] = matrix.tolist()
    return report


def format_report(report: dict) -> str:
    """The metrics on one line, then the confusion matrix as a table, if there is one."""
    values = "  ".join(f"{name} {report[name]:.4f}" for name in ("loss", *METRICS))
    lines = [f"{report['samples']} samples  {values}"]
    if "confusion" in report:
        names = [str(name) for name in report["classes"]]
        width = max(8, *(len(name) for name in names)) + 2
        lines.append("confusion (rows: true class, columns: predicted)")
        lines.append(" " * width + "".join(name.rjust(width) for name in names))
        for name, row in zip(names, report["confusion"], strict=True):
            lines.append(name.ljust(width) + "".join(str(n).rjust(width) for n in row))
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"python -m {__package__}.evaluate",
        description="Evaluate a trained model on labelled data; prints and saves its metrics.",
    )
    parser.add_argument("--checkpoint", required=True, metavar="CKPT", help="e.g. runs/x/best.pt")
    parser.add_argument("--data", required=True, metavar="PATH", help="labelled data")
    parser.add_argument(
        "--out", metavar="FILE", help="JSON to write (default: evaluation.json beside CKPT)"
    )
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--batch-size", type=int, metavar="N", help="default: the run's")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    beside = args.out is None  # with the run it measures, never in the folder it runs in
    if beside:
        args.out = str(Path(args.checkpoint).parent / "evaluation.json")
    out = Path(args.out)
    try:
        if args.batch_size is not None and args.batch_size < 1:
            raise ConfigError("--batch-size must be 1 or more")
        if beside and not Path(args.checkpoint).is_file():
            load_checkpoint(args.checkpoint)  # says what is wrong with it, not with --out
        out = check_output(args.out, args.overwrite, (args.data, args.checkpoint))
        predictor = load_predictor(args.checkpoint, args.device, args.batch_size)
        report = evaluate_data(predictor, args.data)
    except (ConfigError, DataError, CheckpointError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_INPUT
    except OSError as err:
        print(f"error: cannot read {err.filename}: {err.strerror}", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        print("interrupted; nothing was written", file=sys.stderr)
        return 130
    report = {"checkpoint": str(args.checkpoint), "data": str(args.data), **report}
    text = json.dumps(report, indent=2) + "\n"
    try:
        write_atomically(out, lambda f: f.write(text.encode()), fsync=False)
    except OSError as err:
        print(f"error: cannot write {out}: {err.strerror}", file=sys.stderr)
        return EXIT_INPUT
    try:
        print(format_report(report))
        print(f"saved in {out}")
        sys.stdout.flush()  # buffered output meets a closed pipe here, not at exit (120)
    except BrokenPipeError:  # `evaluate ... | head`: the report is saved all the same
        return output_closed()
    return 0


if __name__ == "__main__":
    sys.exit(main())
