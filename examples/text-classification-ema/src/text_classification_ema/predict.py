"""Apply a trained model to new data: a predictions CSV file, or rows from Python."""

import argparse
import csv
import io
import os
import sys
from pathlib import Path

import torch

from .checkpoint import (
    CheckpointError,
    load_checkpoint,
    output_closed,
    require_keys,
    write_atomically,
)
from .config import Config, ConfigError, load_config
from .data import Batches, DataError, NewData
from .device import resolve_device
from .model import build_model
from .resume import PROJECT
from .task import Task

EXIT_INPUT = 2  # a checkpoint, data file or output that cannot be used, as train.py


class Predictor:
    """A trained model with the preprocessing its run saved, ready for files it has not seen.

    Everything comes from the checkpoint: the settings, the model's shape and weights, and the
    data's training statistics, class names or vocabulary; so new data is prepared exactly as
    the training data was.
    """

    def __init__(
        self,
        checkpoint: dict,
        path: str | Path = "checkpoint",
        device: str = "auto",
        batch_size: int | None = None,
    ) -> None:
        require_keys(checkpoint, ("ema", "config", "data", "project"), path)
        project = checkpoint["project"] if isinstance(checkpoint["project"], dict) else {}
        if project.get("package") != __package__:
            raise CheckpointError(
                f"checkpoint {path} was written by project {project.get('package')!r}, not "
                f"{__package__!r}; use that project's predict"
            )
        if project.get("task") != PROJECT["task"]:
            raise CheckpointError(
                f"checkpoint {path} is of a {project.get('task')} model, not {PROJECT['task']}"
            )
        try:
            self.cfg: Config = load_config(base=checkpoint["config"])  # the run's settings
        except (ConfigError, TypeError) as err:
            raise CheckpointError(
                f"checkpoint {path} holds settings this project lacks ({err})"
            ) from None
        self.device = resolve_device(device)
        self.batch_size = batch_size or self.cfg.batch_size
        try:
            self.task = Task.from_state(checkpoint["data"]["task"])
            self.inputs = NewData(checkpoint["data"], self.cfg)
        except ValueError as err:  # an entry of the wrong type or size, named by the check
            raise CheckpointError(
                f"checkpoint {path}: its data entry is unusable: {err}; it was edited or written "
                "by other code"
            ) from None
        except (KeyError, TypeError, AttributeError) as err:
            raise CheckpointError(
                f"checkpoint {path} lacks what prediction needs of its data ({err!r})"
            ) from None
        self.model = build_model(self.cfg, self.inputs.input_shape, self.task.output_dim)
        try:
            # E2: the averaged weights, the ones the run's validation judged.
            self.model.load_state_dict(checkpoint["ema"]["weights"])
        except (KeyError, TypeError, RuntimeError) as err:
            lines = [line.strip() for line in str(err).splitlines() if line.strip()]
            raise CheckpointError(
                f"checkpoint {path} does not fit this project's model ({lines[-1]})"
            ) from None
        self.model.to(self.device)
        self.model.eval()  # dropout off and BatchNorm on its running statistics, as validation

    def batches(self, split) -> Batches:
        """Batches of split on the predictor's device, in a fixed order and never augmented."""
        return Batches(split, self.batch_size, shuffle=False, device=self.device)

    def run(self, split) -> tuple[torch.Tensor, torch.Tensor]:
        """The model's outputs (float32) and the targets of every sample, in batch order."""
        outputs, targets = [], []
        with torch.inference_mode():
            for inputs, batch_targets in self.batches(split):
                outputs.append(self.model(inputs).float().cpu())
                targets.append(batch_targets.cpu())
        return torch.cat(outputs), torch.cat(targets)

    def outputs(self, split) -> torch.Tensor:
        """The model's outputs for every sample of an unlabelled split, in the split's order.

        An unlabelled split's targets are the samples' positions, so the order comes back
        whatever order the batches take (text batches go by length).
        """
        outputs, positions = self.run(split)
        ordered = torch.empty_like(outputs)
        ordered[positions] = outputs
        return ordered

    def predict(self, data: str | Path) -> list[dict]:
        """One row per sample of a file or folder: its id, then the task's prediction columns."""
        ids, split = self.inputs.read(str(data), self.task, labelled=False)
        columns = self.task.predictions(self.outputs(split))
        return [
            {"id": sample, **{name: values[i] for name, values in columns.items()}}
            for i, sample in enumerate(ids)
        ]


def load_predictor(
    path: str | Path, device: str = "auto", batch_size: int | None = None
) -> Predictor:
    """The model of a checkpoint (best.pt or last.pt), e.g. load_predictor("runs/x/best.pt")."""
    return Predictor(load_checkpoint(path), path, device=device, batch_size=batch_size)


def write_rows(rows: list[dict], path: Path) -> None:
    """A CSV file with a header row, written beside its place and renamed: never half a file."""
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    # File names that are not UTF-8 (ids of images and text files) keep their own bytes.
    data = text.getvalue().encode("utf-8", "surrogateescape")
    write_atomically(path, lambda f: f.write(data), fsync=False)


def check_output(
    out: str, overwrite: bool, inputs: tuple[str, ...], example: str = "predictions.csv"
) -> Path:
    """The --out file, refused where writing it would lose something or could not work.

    Only a regular file is ever replaced (with --overwrite), and never one of the inputs: a
    device, pipe or link named by mistake, the data or the checkpoint stay as they are.
    """
    path = Path(out)
    if out.endswith(("/", os.sep)) or path.is_dir():
        raise ConfigError(f"--out {out} is a folder; give a file name such as {example}")
    if os.path.lexists(path):
        if not overwrite:
            raise ConfigError(f"--out {path} exists; choose another file or add --overwrite")
        if path.is_symlink() or not path.is_file():
            raise ConfigError(f"--out {path} is not a regular file; choose another --out")
        for given in inputs:
            if os.path.exists(given) and os.path.samefile(given, path):
                raise ConfigError(f"--out {path} is the input {given}; choose another --out")
    if not path.parent.is_dir():
        raise ConfigError(f"--out {path}: folder {path.parent} does not exist")
    return path


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"python -m {__package__}.predict",
        description="Predict with a trained model: one row per sample, written as CSV.",
    )
    parser.add_argument("--checkpoint", required=True, metavar="CKPT", help="e.g. runs/x/best.pt")
    parser.add_argument("--data", required=True, metavar="PATH", help="the new data to predict")
    parser.add_argument("--out", default="predictions.csv", metavar="FILE", help="CSV to write")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--batch-size", type=int, metavar="N", help="default: the run's")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    out = Path(args.out)
    try:
        if args.batch_size is not None and args.batch_size < 1:
            raise ConfigError("--batch-size must be 1 or more")
        out = check_output(args.out, args.overwrite, (args.data, args.checkpoint))
        predictor = load_predictor(args.checkpoint, args.device, args.batch_size)
        rows = predictor.predict(args.data)
    except (ConfigError, DataError, CheckpointError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_INPUT
    except OSError as err:
        print(f"error: cannot read {err.filename}: {err.strerror}", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        print("interrupted; nothing was written", file=sys.stderr)
        return 130
    try:
        write_rows(rows, out)
    except OSError as err:
        print(f"error: cannot write {out}: {err.strerror}", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        print("interrupted; nothing was written", file=sys.stderr)
        return 130
    try:
        print(f"{len(rows)} predictions in {out}")
        sys.stdout.flush()  # buffered output meets a closed pipe here, not at exit (120)
    except BrokenPipeError:  # `predict ... | head`: the predictions are written all the same
        return output_closed()
    return 0


if __name__ == "__main__":
    sys.exit(main())
