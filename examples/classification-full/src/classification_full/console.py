"""What a run shows: the progress bar, the epoch lines, the summary, TensorBoard's scalars."""

import pickle
from pathlib import Path

import torch
from tqdm import tqdm

from .config import ConfigError
from .task import METRICS


def epoch_bar(epoch: int, epochs: int, steps: int, done: int = 0) -> tqdm:
    """A bar over one epoch's training steps, on stderr; cleared when the epoch's line prints.
    `done`: the steps a resumed epoch trained before its checkpoint."""
    return tqdm(total=steps, initial=done, desc=f"epoch {epoch}/{epochs}", unit="step", leave=False)


def load_summary_writer():
    """What opens a run's TensorBoard writer, imported only when asked for (an extra), so that
    a missing package is refused before --out is touched."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise ConfigError(
            'tensorboard = true needs the tensorboard package: pip install -e ".[tensorboard]" '
            "(or set tensorboard=false)"
        ) from None

    def open_writer(out: Path, first_epoch: int):
        """One step per epoch; purge_step hides the events an earlier run in this folder
        logged from first_epoch on (those a resumed run trains again, or an overwritten
        run's)."""
        folder = str(out / "tensorboard")
        try:
            return SummaryWriter(folder, purge_step=first_epoch)
        except OSError as err:  # e.g. a file where its folder goes: before anything trains
            reason = "it is a file" if Path(folder).is_file() else err.strerror
            raise ConfigError(
                f"cannot write TensorBoard's events to {folder}: {reason}; move what is there "
                "away, or set tensorboard=false"
            ) from None

    return open_writer


def log_epoch(writer, row: dict, fp16_steps: int) -> None:
    """One row of metrics.csv as TensorBoard scalars, the epoch as their step.

    fp16_steps: the epoch's steps when a GradScaler is on (fp16), else 0.
    """
    epoch = row["epoch"]
    writer.add_scalar("loss/train", row["train_loss"], epoch)
    writer.add_scalar("loss/val", row["val_loss"], epoch)
    for name in METRICS:
        writer.add_scalar(f"val/{name}", row[f"val_{name}"], epoch)
    writer.add_scalar("lr", row["lr"], epoch)
    if fp16_steps:
        writer.add_scalar("amp/skipped_fraction", row["skipped_steps"] / fp16_steps, epoch)
    writer.flush()  # TensorBoard shows each epoch as soon as it ends


def format_row(row: dict, improved: bool, seconds: float, epochs: int) -> str:
    metrics = "  ".join(
        f"{k} {v}" if isinstance(v, int) else f"{k} {v:.4f}"
        for k, v in row.items()
        if k not in ("epoch", "lr")
    )
    mark = "  *" if improved else ""
    return f"epoch {row['epoch']:>3}/{epochs}  lr {row['lr']:.2e}  {metrics}  {seconds:.2f}s{mark}"


def human_duration(seconds: float) -> str:
    """12.34 -> '12.3 s', 754 -> '12 min 34 s', 7530 -> '2 h 05 min'."""
    if seconds < 59.95:
        return f"{seconds:.1f} s"
    minutes, seconds = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def summary_line(result: dict, seconds: float, out: str) -> str:
    """The run's last line: its best epoch and that epoch's metrics, and how long it took."""
    history = result["history"]
    best = next(row for row in history if row["epoch"] == result["best_epoch"])
    metrics = ", ".join(f"val_{name} {best[f'val_{name}']:.4f}" for name in METRICS)
    return (
        f"best val_loss {best['val_loss']:.4f} at epoch {best['epoch']} of "
        f"{history[-1]['epoch']} ({metrics}); {human_duration(seconds)}; "
        f"metrics and checkpoints in {out}"
    )


def human_size(n_bytes: float) -> str:
    """1234567 -> '1.2 MB'."""
    units = ["bytes", "kB", "MB", "GB", "TB"]
    while n_bytes >= 1000 and len(units) > 1:
        n_bytes /= 1000
        units.pop(0)
    return f"{n_bytes:.0f} bytes" if units[0] == "bytes" else f"{n_bytes:.1f} {units[0]}"


# What torch.save's zip archive spends on each tensor besides its bytes: the record's headers,
# its name twice and the padding that aligns its data to 64 bytes (about 250 bytes a tensor,
# measured with torch 2.13 on the four tasks' models).
TENSOR_RECORD_BYTES = 250


def saved_size(value) -> int:
    """About the bytes torch.save writes for nested dicts, lists and tuples of tensors and plain
    values: each tensor's bytes and archive record, and the rest pickled (pickle alone would
    hand the tensors to torch.save: an estimate writes nothing)."""
    tensors: list[torch.Tensor] = []

    def plain(item):
        if isinstance(item, torch.Tensor):
            tensors.append(item)
            return None
        if isinstance(item, dict):
            return {key: plain(inner) for key, inner in item.items()}
        if isinstance(item, (list, tuple)):
            return [plain(inner) for inner in item]
        return item

    rest = len(pickle.dumps(plain(value)))
    return rest + sum(t.numel() * t.element_size() + TENSOR_RECORD_BYTES for t in tensors)


def describe_size(model: torch.nn.Module, fixed: dict) -> str:
    """One line with the parameter count and the size of a checkpoint, before anything trains.

    The weights and AdamW's moments are counted (they do not exist yet); `fixed`, the parts of
    a checkpoint that do not grow with training (settings, the data's state, the random
    streams), is measured as torch.save would write it."""
    count = sum(p.numel() for p in model.parameters())
    state = model.state_dict()  # parameters and buffers (BatchNorm's statistics)
    trained = [p for p in model.parameters() if p.requires_grad]
    copies = 1
    tensors = copies * len(state) + 3 * len(trained)  # AdamW: two moments and a step count each
    size = (
        copies * sum(t.numel() * t.element_size() for t in state.values())
        + 2 * sum(p.numel() * p.element_size() for p in trained)
        + TENSOR_RECORD_BYTES * tensors
        + saved_size(fixed)
    )
    return f"model: {count:,} parameters; each checkpoint about {human_size(size)}"
