"""What a checkpoint holds (S5): the objects training changes and the run's record, saved and
restored as one, so that a resume cannot leave a part behind."""

import math
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import torch

from . import TEMPLATE_VERSION
from .checkpoint import CheckpointError
from .data import Batches
from .resume import PROJECT
from .seed import rng_state, set_rng_state


@dataclass
class TrainingState:
    """The objects training changes and the record of the run so far.

    `state_dict` is a checkpoint: every object's state, the random streams and the record;
    `load_state_dict` restores all of it from one. A mid-epoch checkpoint (C5) also holds the
    epoch's position, which the loop writes and a resume hands back to it.
    """

    # The plain module, never the DDP or compiled wrapper: its state has no "module." (M5) or
    # "_orig_mod." (C4) prefix, so a checkpoint loads with or without them.
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    train_batches: Batches  # its generator draws the batch order
    steps_per_epoch: int
    fixed: dict  # the config and the data's description: the same all run
    # Each run has an id, saved in its checkpoints: a resumed run knows its own best.pt.
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    epochs_done: int = 0
    best_epoch: int = 0
    best_val_loss: float = math.inf
    history: list[dict] = field(default_factory=list)  # one metrics row per epoch
    mlflow_run_id: str = ""  # tracked or not: a later resume with tracking continues that run

    def judge(self, epoch: int, val_loss: float) -> bool:
        """R13: whether `epoch`'s validation loss is the best so far; recorded if it is."""
        improved = val_loss < self.best_val_loss
        if improved:
            self.best_epoch, self.best_val_loss = epoch, val_loss
        return improved

    def unchanging_parts(self) -> dict:
        """The parts of its checkpoints that training does not grow, for the size estimate."""
        parts = {**self.fixed, "rng": rng_state(), "project": PROJECT}
        parts["batch_rng"] = self.train_batches.generator.get_state()
        return parts

    def state_dict(self, epochs_done: int, position: dict | None = None) -> dict:
        """Everything a resume needs (S5), after `epochs_done` epochs and, with `position`,
        part of the next one (C5)."""
        steps = (position or {}).get("steps", 0)
        state = {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "epoch": epochs_done,
            "global_step": epochs_done * self.steps_per_epoch + steps,
            "best_epoch": self.best_epoch,
            "best_val_loss": self.best_val_loss,
            "history": list(self.history),  # a copy: the next epochs append to the record's
            "rng": rng_state(),
            "batch_rng": self.train_batches.generator.get_state(),
            **self.fixed,
            "run_id": self.run_id,
            "mlflow_run_id": self.mlflow_run_id,
            "project": PROJECT,
            "template_version": TEMPLATE_VERSION,
        }
        if position is not None:
            state["position"] = position
        return state

    def load_state_dict(self, checkpoint: dict, path: Path) -> dict | None:
        """S5: restore every state, not only the weights, from `checkpoint` (read from `path`).
        Returns where a mid-epoch checkpoint stopped (C5), None after a whole epoch."""
        position = checkpoint.get("position")
        try:
            self.model.load_state_dict(checkpoint["model"])
            self.optimizer.load_state_dict(checkpoint["optimizer"])
            self.scheduler.load_state_dict(checkpoint["scheduler"])
            if position is None:
                self.train_batches.generator.set_state(checkpoint["batch_rng"])
            else:  # C5: the epoch's batch order again, going on after the batches it used
                self.train_batches.resume_at(
                    position["batches"], position["batch_rng"], checkpoint["batch_rng"]
                )
            set_rng_state(checkpoint["rng"])
        except (KeyError, RuntimeError, TypeError, ValueError) as err:
            if isinstance(err, CheckpointError):
                raise
            # torch names the first mismatch on the second line of a multi-line message.
            lines = [line.strip() for line in str(err).splitlines() if line.strip()]
            detail = lines[min(1, len(lines) - 1)] if lines else repr(err)
            raise CheckpointError(
                f"checkpoint {path} does not fit this project's model or settings "
                f"({detail}); give a last.pt written by this project's training"
            ) from None
        self.run_id, self.epochs_done = checkpoint["run_id"], checkpoint["epoch"]
        self.best_epoch, self.best_val_loss = checkpoint["best_epoch"], checkpoint["best_val_loss"]
        self.history = list(checkpoint["history"])
        self.mlflow_run_id = checkpoint.get("mlflow_run_id", "")
        return position
