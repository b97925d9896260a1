"""Checkpoints inside an epoch (C5): after an optimizer step, when one is due or a SIGTERM came."""

import torch

from .distributed import Context, gather, max_over_ranks, sum_over_ranks
from .progress import EpochProgress
from .run_files import RunWriter
from .state import TrainingState
from .stopping import STOP, Stopped, broken_weights

# Under torchrun the ranks agree every this many optimizer steps whether to write a mid-epoch
# checkpoint or stop (C5, M8): one small all-reduce per 10 steps instead of one per step.
AGREE_EVERY = 10


class StepSaver:
    """Called after each optimizer step of an epoch (train_one_epoch's `after_step`): writes a
    mid-epoch checkpoint when one is due or a SIGTERM or SIGHUP came, then stops the run if
    one came, so that a scheduler's grace period loses no finished step."""

    def __init__(
        self, training: TrainingState, files: RunWriter, ctx: Context, device: torch.device
    ) -> None:
        self.training, self.files, self.ctx, self.device = training, files, ctx, device
        self.writes = ctx.is_main  # M5: rank 0 alone writes the run's files
        self.epoch, self.lr, self.epoch_rng = 0, 0.0, None

    def begin(self, epoch: int, lr: float, epoch_rng) -> None:
        """The epoch that trains now, the rate it began with and its batch order's generator
        state when it began: what a resume needs to go on inside it."""
        self.epoch, self.lr, self.epoch_rng = epoch, lr, epoch_rng

    def __call__(self, progress: EpochProgress, trained: bool = False) -> None:
        """`trained`: the epoch's steps are all done (only a SIGTERM that came after its last
        step is left to act on)."""
        steps_per_epoch = self.training.steps_per_epoch
        step = (self.epoch - 1) * steps_per_epoch + progress.steps
        model = self.training.model
        ctx = self.ctx
        if ctx.launched:
            # M8: the ranks decide together (a write gathers from each), every AGREE_EVERY
            # optimizer steps of the run: rank 0's clock and any rank's signal decide for all.
            if step % AGREE_EVERY and not trained:
                return
            due = ctx.is_main and not trained and self.files.due(step, inside=True)
            asked = torch.tensor([due, STOP.signum or 0], device=self.device).double()
            due, signum = max_over_ranks(asked).tolist()
            # Decided on the agreed values alone: a signal that lands on one rank while they
            # agree is that rank's until their next agreement. Read from STOP.signum, it would
            # stop that rank alone, and the others would wait in their next collective.
            stopping = bool(signum)
            if stopping:
                STOP.signum = int(signum)  # every rank stops on it, and rank 0 names it
            if not (due or stopping):
                return
            # Weights that a bad step broke are never saved; the loop stops on them itself.
            bad = torch.tensor([not progress.finite()], device=self.device).double()
            good = not sum_over_ranks(bad).item() and not broken_weights(model)
        else:
            due = not trained and self.files.due(step, inside=True)
            stopping = STOP.signum is not None
            if not (due or stopping):
                return
            good = progress.finite() and not broken_weights(model)
        if good:
            position = {
                "steps": progress.steps,
                "batches": progress.batches,  # used by those steps
                "batch_rng": self.epoch_rng,  # the batch order's generator when it began
                "lr": self.lr,  # the rate the epoch began with, for its metrics row
                "progress": gather(progress.state_dict()),  # each rank's losses so far
            }
            state = self.training.state_dict(self.epoch - 1, position)
            where = f"step {progress.steps} of {steps_per_epoch}"
            if ctx.is_main:  # M5: rank 0 alone writes
                self.files.write_inside(state, where)
        if stopping:
            STOP.raised = True  # another signal while the run stops is ignored
            raise Stopped(STOP.signum)

    def stop_if_asked(self) -> None:
        """After an epoch's writes: a SIGTERM or SIGHUP that came during validation or the
        writes stops the run here, and the epoch is written on the way out (EpochsEnd)."""
        # M8: every rank together, on any rank's signal.
        asked = torch.tensor([STOP.signum or 0], device=self.device).double()
        if signum := int(max_over_ranks(asked).item()):
            STOP.raised = True
            raise Stopped(signum)
