"""Resuming a run: what a checkpoint must match, which settings may change, and restoring.

Also the checks of a run's size against its processes, taken with the checkpoint's (M1, C5).
"""

import dataclasses
import sys
from pathlib import Path

import torch

from .checkpoint import (
    TRAINING_RUN_HINT,
    CheckpointError,
    link_checkpoint,
    load_checkpoint,
    require_keys,
)
from .config import Config, ConfigError, load_config
from .interface import Data

# What a checkpoint must match to be resumed here: this project and the options it was
# rendered with (another scheduler's state would load silently and train at a wrong rate).
PROJECT = {
    "package": __package__,
    "task": "regression",
    "scheduler": "cosine",
    "amp": False,
    "clip": True,
    "early_stopping": False,
    "warmup": True,  # a per-step schedule: an epoch scheduler's state would not fit it
}
# Settings a resumed run may change; every other one shapes the data, the model or the batch
# order, so changing it would not continue the same run.
CHANGEABLE_ON_RESUME = (
    "epochs",
    "lr",
    "weight_decay",
    "min_lr",
    "max_grad_norm",
    "device",
    "deterministic",
    "out",
    "progress",
    "tensorboard",
    "tracking",
    "checkpoint_every_s",
    "checkpoint_every_steps",
    "val_batch_size",
)


def checkpoint_to_resume(
    resume: str | None, config: str | None, overrides: list[str]
) -> tuple[dict | None, dict | None, str | None]:
    """--resume's checkpoint, checked; the settings a resumed run starts from (the checkpoint's,
    in its own folder); and its path. None for each when a new run starts.

    "auto" is one command for every start of a job that restarts (torchrun --max-restarts, a
    requeued SLURM job): --out's last.pt if there is one, else a new run there."""
    if resume == "auto":
        last = Path(load_config(config, overrides).out) / "last.pt"
        resume = str(last) if last.is_file() else None
    if not resume:
        return None, None, None
    checkpoint = load_checkpoint(resume)
    check_checkpoint(checkpoint, resume)
    return checkpoint, {**checkpoint["config"], "out": str(Path(resume).parent)}, resume


def check_checkpoint(checkpoint: dict, path: str | Path) -> None:
    """Refuse, naming what differs, a checkpoint that this project cannot resume."""
    require_keys(checkpoint, ("project", "run_id", "config"), path)
    theirs, config = checkpoint["project"], checkpoint["config"]
    if not isinstance(theirs, dict) or not isinstance(config, dict):
        raise CheckpointError(f"checkpoint {path} has no usable 'project' or 'config' entry")
    if theirs.get("package") != PROJECT["package"]:
        raise CheckpointError(
            f"checkpoint {path} was written by project {theirs.get('package')!r}, not "
            f"{PROJECT['package']!r}; resume it with that project's training"
        )
    differ = [key for key, value in PROJECT.items() if theirs.get(key) != value]
    if differ:
        raise CheckpointError(
            f"checkpoint {path} was written with "
            + ", ".join(f"{key}={theirs.get(key)}" for key in differ)
            + "; this project has "
            + ", ".join(f"{key}={PROJECT[key]}" for key in differ)
            + ", so it cannot resume it; start a fresh run instead"
        )
    require_keys(
        checkpoint,
        ("model", "optimizer", "scheduler", "epoch", "best_epoch", "best_val_loss", "history")
        + ("rng", "batch_rng", "data"),
        path,
    )
    if "position" in checkpoint:
        check_position(checkpoint["position"], path)


def check_position(position, path: str | Path) -> None:
    """Refuse a mid-epoch position (C5) that this project did not write as it is."""
    fields = {"steps": int, "batches": int, "batch_rng": torch.Tensor, "lr": float}
    fields["progress"] = dict
    progresses = [position.get("progress") if isinstance(position, dict) else None]
    well_formed = isinstance(position, dict) and all(
        isinstance(position.get(key), kind) for key, kind in fields.items()
    )
    for progress in progresses:
        well_formed = (
            well_formed
            and isinstance(progress, dict)
            and isinstance(progress.get("losses"), torch.Tensor)
            and isinstance(progress.get("sizes"), list)
            and len(progress["sizes"]) == len(progress["losses"]) == position["steps"]
            and isinstance(progress.get("batches"), int)
        )
    if not well_formed:
        raise CheckpointError(
            f"checkpoint {path} has a damaged 'position' entry (where inside an epoch it was "
            f"written); {TRAINING_RUN_HINT}"
        )


def check_resume_settings(cfg: Config, checkpoint: dict, path: str | Path) -> None:
    """Refuse changed settings that would not continue the same run, and runs already done."""
    saved = checkpoint["config"]
    fixed = [
        key
        for key, value in dataclasses.asdict(cfg).items()
        if key not in CHANGEABLE_ON_RESUME and saved.get(key) != value
    ]
    if fixed:
        changes = ", ".join(f"{key} ({saved.get(key)!r} -> {getattr(cfg, key)!r})" for key in fixed)
        raise ConfigError(
            f"cannot change {changes} when resuming: they define the data, the model or the "
            "batch order of the run; start a fresh run with another --out instead"
        )
    epoch = checkpoint["epoch"]
    if epoch >= cfg.epochs:
        raise ConfigError(
            f"checkpoint {path} has trained {epoch} of {cfg.epochs} epochs, so there is nothing "
            f"to resume; to train longer, resume with --epochs N (more than {epoch})"
        )


def relink_best(checkpoint: dict, path: Path, out: Path) -> None:
    """Give best.pt back its epoch when a run was killed between writing last.pt and linking
    best.pt to it: the resumed last.pt names itself as the best epoch (R13)."""
    last, best = out / "last.pt", out / "best.pt"
    if checkpoint["best_epoch"] != checkpoint["epoch"] or "position" in checkpoint:
        return  # another epoch's, or a mid-epoch checkpoint (C5), which is never the best
    if not last.is_file():
        return
    if last.samefile(path) and not (best.exists() and best.samefile(last)):
        link_checkpoint(last, best)


def restore(cfg: Config, training, checkpoint: dict, path: Path, data: Data) -> dict | None:
    """S5: the run's whole state from `checkpoint` (read from `path`) into `training` (its
    TrainingState), on the data it was trained on, then the settings this resume changed.
    Returns where a mid-epoch checkpoint stopped (C5), None after a whole epoch."""
    check_same_data(checkpoint, data, path)
    position = training.load_state_dict(checkpoint, path)
    print(apply_resume_settings(cfg, checkpoint, training), flush=True)
    relink_best(checkpoint, path, Path(cfg.out))
    return position


def check_same_data(checkpoint: dict, data: Data, path: Path) -> None:
    """Refuse to resume on data other than the run's (a CSV file edited since, for instance)."""
    saved = checkpoint["data"] if isinstance(checkpoint["data"], dict) else {}

    def equal(a, b) -> bool:
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
            return a.shape == b.shape and torch.equal(a, b)
        return type(a) is type(b) and a == b

    current = data.state_dict()
    if "content_digest" not in saved:  # written before checkpoints held a digest of the data
        current.pop("content_digest", None)
        print(
            f"warning: {path} holds no digest of its data (an older project wrote it): only the "
            "data's shape and statistics are compared, not every value and label",
            file=sys.stderr,
        )
    differ = [key for key, value in current.items() if not equal(saved.get(key), value)]
    if differ:
        raise CheckpointError(
            f"checkpoint {path} was trained on other data ({', '.join(differ)} differ); "
            "resume with the data it was trained on"
        )


def apply_resume_settings(cfg: Config, checkpoint: dict, training) -> str:
    """Put the settings a resumed run changed into the restored optimizer and scheduler.

    `training` is the run's TrainingState. Returns the line that says what changed. The
    optimizer's and scheduler's states hold the old values, so without this a new lr would be
    recorded in the checkpoint but not used.
    """
    saved, epoch = checkpoint["config"], checkpoint["epoch"]
    optimizer, scheduler = training.optimizer, training.scheduler  # a TrainingState
    changed = [key for key in CHANGEABLE_ON_RESUME if saved.get(key) != getattr(cfg, key, None)]
    for group in optimizer.param_groups:
        group["weight_decay"] = cfg.weight_decay
    note = ""
    if {"epochs", "lr", "min_lr"} & set(changed):
        # The schedule becomes the one a run with these settings follows: the steps already
        # taken keep their rates, the next takes the closed-form rate of its step count (R7),
        # so the warm-up never restarts and the decay ends at the new last step.
        scheduler.epochs, scheduler.min_lr = cfg.epochs, cfg.min_lr
        scheduler.reset_rates(cfg.lr)
        total = cfg.epochs * scheduler.steps_per_epoch
        note = (
            f"; schedule rebuilt for {cfg.epochs} epochs ({total} optimizer steps): step "
            f"{scheduler.last_epoch + 1} trains at lr {optimizer.param_groups[0]['lr']:.2e}, "
            f"falling to {cfg.min_lr:.2e}"
        )
    # What is shown (a progress bar, TensorBoard, MLflow) is no change to the run: not reported.
    told = [key for key in changed if key not in ("progress", "tensorboard", "tracking")]
    what = ", ".join(f"{key} {saved.get(key)} -> {getattr(cfg, key)}" for key in told)
    where = f"after epoch {epoch}"
    if "position" in checkpoint:  # C5: written inside the next epoch
        where = f"in epoch {epoch + 1} after its step {checkpoint['position']['steps']}"
    return f"resuming {where}" + (f" with {what}" if what else "") + note
