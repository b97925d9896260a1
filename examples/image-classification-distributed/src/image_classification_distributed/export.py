"""Export a trained model for serving: ONNX, or a torch.export program, with its preprocessing.

The model comes from a checkpoint as predict loads it, in eval mode, on the CPU, in float32
and is exported with a dynamic batch dimension (and a dynamic length for documents).
Beside it, `<out>.json` holds what predict does before the forward pass and after it: the
input's name, dtype and shape, the training statistics, class names or vocabulary, and how the
outputs become predictions; so a serving system can prepare new data exactly as predict does.
"""

import argparse
import contextlib
import json
import logging
import os
import re
import sys
import tempfile
import warnings
from pathlib import Path

import torch

from .checkpoint import (
    TEMPORARY_SUFFIX,
    CheckpointError,
    current_umask,
    load_checkpoint,
    write_atomically,
)
from .config import ConfigError
from .predict import EXIT_INPUT, Predictor, check_output
from .resume import PROJECT

# Each format, the file name it gets by default, and the extra it needs beyond torch.
FORMATS = {"onnx": "model.onnx", "torch-export": "model.pt2"}
EXTRA = 'pip install -e ".[export]"'
ANSI = re.compile(r"\x1b\[[0-9;]*m")  # the exporter colours some of its messages


class ExportError(Exception):
    """What could not be exported and why, in one line."""


def sidecar(out: Path) -> Path:
    """The JSON file written beside an exported model: model.onnx -> model.onnx.json."""
    return out.with_name(out.name + ".json")


def require_onnx() -> None:
    """Raise ExportError naming the extra when torch's ONNX exporter lacks its packages."""
    for name in ("onnx", "onnxscript"):
        try:
            __import__(name)
        except ImportError:
            raise ExportError(
                f"ONNX export needs the package {name}, which is not installed; install the "
                f"export extra: {EXTRA}"
            ) from None


def dynamic_shapes(spec: dict) -> dict:
    """torch.export's Dim per dimension of the input that may vary (named by a str in its
    shape); the others stay as they are."""
    limits = spec.get("max", {})
    return {
        axis: torch.export.Dim(size, min=1, **({"max": limits[size]} if size in limits else {}))
        for axis, size in enumerate(spec["shape"])
        if isinstance(size, str)
    }


def reason(err: BaseException) -> str:
    """The exporter's own failure as a few words: the underlying error's first line, and the
    line of the model's code that raised it when the message names one."""
    cause = err.__cause__ or err
    text = ANSI.sub("", str(cause)).strip()
    first = text.splitlines()[0].strip() if text else "no message"
    words = f"{type(cause).__name__}: {first}"
    where = re.search(r'File "([^"]+)", line (\d+), in \S+\n\s*(\S.*)', text)
    if where:
        words += f" (at {where.group(1)}:{where.group(2)}: {where.group(3).strip()})"
    return words


@contextlib.contextmanager
def exporter_quiet():
    """The exporter logs graphs, warnings and progress of its own, through Python's logging and
    warnings and straight to the file descriptors: all kept out of the terminal, as its
    failures become one line."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    disabled = logging.root.manager.disable
    with (
        tempfile.TemporaryFile() as sink,
        open(os.devnull, "w") as devnull,
        contextlib.redirect_stdout(devnull),
        contextlib.redirect_stderr(devnull),
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("ignore")
        logging.disable(logging.CRITICAL)
        try:
            os.dup2(sink.fileno(), 1)
            os.dup2(sink.fileno(), 2)
            yield
        finally:
            logging.disable(disabled)
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


def export_onnx(model: torch.nn.Module, example: torch.Tensor, spec: dict, output: str, out: Path):
    """The model as an ONNX file, through torch.onnx.export's torch.export-based exporter
    (dynamo=True: the one torch recommends, and its default since 2.9)."""
    require_onnx()
    try:
        with exporter_quiet():
            program = torch.onnx.export(
                model,
                (example,),
                dynamo=True,
                input_names=[spec["name"]],
                output_names=[output],
                dynamic_shapes=(dynamic_shapes(spec),),
                verbose=False,
            )
    except Exception as err:  # the exporter reports failures with many exception types
        raise ExportError(f"cannot export the model to ONNX: {reason(err)}") from None
    # Written beside its place and renamed, as checkpoints are: never half a file at --out.
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=TEMPORARY_SUFFIX)
    os.close(fd)
    try:
        os.chmod(tmp, 0o666 & ~current_umask())  # the mode any new file gets, not mkstemp's
        with exporter_quiet():
            program.save(tmp, external_data=False)  # one file: the weights inside
        os.replace(tmp, out)
    except OSError:
        Path(tmp).unlink(missing_ok=True)
        raise
    except Exception as err:  # e.g. a model over ONNX's 2 GB limit for one file
        Path(tmp).unlink(missing_ok=True)
        raise ExportError(f"cannot write the ONNX model: {reason(err)}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def export_program(model: torch.nn.Module, example: torch.Tensor, spec: dict, out: Path):
    """The model as a torch.export program (torch.export.save; torch.export.load reads it)."""
    try:
        with exporter_quiet():
            program = torch.export.export(
                model, (example,), dynamic_shapes=(dynamic_shapes(spec),), strict=False
            )
    except Exception as err:
        raise ExportError(f"cannot export the model with torch.export: {reason(err)}") from None
    with exporter_quiet():  # e.g. a warning about channels_last weights, which load fine
        write_atomically(out, lambda f: torch.export.save(program, f), fsync=False)


def describe(predictor: Predictor, checkpoint: dict, path: str, fmt: str) -> dict:
    """The JSON beside the model: predict's preprocessing, the model's input and output."""
    serving = predictor.inputs.serving()
    return {
        "format": fmt,
        "project": {"package": __package__, "task": PROJECT["task"]},
        "checkpoint": {
            "path": str(path),
            "run_id": checkpoint.get("run_id"),
            "epoch": checkpoint.get("epoch"),
        },
        "precision": "float32",
        "input": serving["input"],
        "output": predictor.task.serving(),
        "preprocessing": serving["preprocessing"],
    }


def export(checkpoint_path: str, fmt: str, out: Path) -> dict:
    """Export the model of checkpoint_path to out in fmt, and its description beside it."""
    if fmt == "onnx":
        require_onnx()  # before the checkpoint is read: the missing extra is the news
    checkpoint = load_checkpoint(checkpoint_path)
    predictor = Predictor(checkpoint, checkpoint_path, device="cpu")  # as predict loads it
    model = predictor.model.float().eval()
    spec = predictor.inputs.serving()["input"]
    example = predictor.inputs.example()
    description = describe(predictor, checkpoint, checkpoint_path, fmt)
    if fmt == "onnx":
        export_onnx(model, example, spec, description["output"]["name"], out)
    else:
        export_program(model, example, spec, out)
    text = json.dumps(description, indent=2, ensure_ascii=False) + "\n"
    try:
        write_atomically(sidecar(out), lambda f: f.write(text.encode("utf-8")), fsync=False)
    except BaseException:  # a model without its preprocessing would be served wrongly
        out.unlink(missing_ok=True)
        raise
    return description


def check_outputs(out: str, overwrite: bool, checkpoint: str, example: str) -> Path:
    """--out and the JSON beside it, refused as predict refuses its --out."""
    path = check_output(out, overwrite, (checkpoint,), example)
    json_path = sidecar(path)
    if os.path.lexists(json_path):
        if not overwrite:
            raise ConfigError(
                f"{json_path} (written beside --out) exists; choose another --out or add "
                "--overwrite"
            )
        if json_path.is_symlink() or not json_path.is_file():
            raise ConfigError(f"{json_path} is not a regular file; choose another --out")
    return path


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"python -m {__package__}.export",
        description=(
            "Export a trained model for serving (ONNX or torch.export), with a JSON file of "
            "its preprocessing beside it."
        ),
    )
    parser.add_argument("--checkpoint", required=True, metavar="CKPT", help="e.g. runs/x/best.pt")
    parser.add_argument(
        "--format", default="onnx", metavar="FORMAT", help=f"{' or '.join(FORMATS)} (default onnx)"
    )
    parser.add_argument(
        "--out", metavar="FILE", help="default: model.onnx, or model.pt2 for torch-export"
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.format not in FORMATS:
            raise ConfigError(
                f"--format {args.format} is not one of {', '.join(FORMATS)}; torch.jit "
                "(TorchScript) is deprecated, and torch.export replaces it"
            )
        example = FORMATS[args.format]
        out = check_outputs(args.out or example, args.overwrite, args.checkpoint, example)
        description = export(args.checkpoint, args.format, out)
    except (ConfigError, CheckpointError, ExportError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_INPUT
    except OSError as err:
        print(f"error: cannot write {err.filename or args.out}: {err.strerror}", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        print("interrupted; no model was exported", file=sys.stderr)
        return 130
    shape = ", ".join(str(size) for size in description["input"]["shape"])
    print(f"{args.format} model in {out} (input {description['input']['name']}: {shape});")
    print(f"its preprocessing in {sidecar(out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
