"""Checkpoints inside an epoch (C5): after an optimizer step, when one is due or a SIGTERM came."""

from .progress import EpochProgress
from .run_files import RunWriter
from .state import TrainingState
from .stopping import STOP, Stopped, broken_weights


class StepSaver:
    """Called after each optimizer step of an epoch (train_one_epoch's `after_step`): writes a
    mid-epoch checkpoint when one is due or a SIGTERM or SIGHUP came, then stops the run if
    one came, so that a scheduler's grace period loses no finished step."""

    def __init__(self, training: TrainingState, files: RunWriter) -> None:
        self.training, self.files = training, files
        self.writes = True  # the one process writes the run's files
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
        due = not trained and self.files.due(step, inside=True)
        stopping = STOP.signum is not None
        if not (due or stopping):
            return
        # Weights that a bad step broke are never saved; the loop stops on them itself.
        good = progress.finite() and not broken_weights(model)
        if good:
            position = {
                "steps": progress.steps,
                "batches": progress.batches,  # used by those steps
                "batch_rng": self.epoch_rng,  # the batch order's generator when it began
                "lr": self.lr,  # the rate the epoch began with, for its metrics row
                "progress": progress.state_dict(),  # the losses so far
            }
            state = self.training.state_dict(self.epoch - 1, position)
            where = f"step {progress.steps} of {steps_per_epoch}"
            self.files.write_inside(state, where)
        if stopping:
            STOP.raised = True  # another signal while the run stops is ignored
            raise Stopped(STOP.signum)

    def stop_if_asked(self) -> None:
        """After an epoch's writes: a SIGTERM or SIGHUP that came during validation or the
        writes stops the run here, and the epoch is written on the way out (EpochsEnd)."""
        if STOP.signum is not None:
            STOP.raised = True
            raise Stopped(STOP.signum)
