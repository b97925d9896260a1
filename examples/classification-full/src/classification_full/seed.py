"""Seeding, deterministic mode, capture/restore of every random number generator, and a batch
order that a resumed run takes up in the middle of an epoch."""

import os
import random

import numpy as np
import torch


def seed_everything(seed: int, deterministic: bool = True) -> None:
    """Seed Python, NumPy and torch (CPU and CUDA) before anything random is built (S1, S3)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # seeds the CPU and every CUDA device
    torch.cuda.manual_seed_all(seed)  # explicit for CUDA devices initialised later
    if deterministic:
        # cuBLAS reads this when CUDA starts; without it deterministic GEMMs raise.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
        # warn_only: an op without a deterministic kernel warns instead of stopping the run.
        torch.use_deterministic_algorithms(True, warn_only=True)
    else:
        # Faster kernels chosen by benchmarking; runs are no longer bitwise repeatable.
        torch.backends.cudnn.deterministic = False
        torch.backends.cudnn.benchmark = True
        torch.use_deterministic_algorithms(False)


def rng_state() -> dict:
    """Every global RNG state, as plain types that torch.load(weights_only=True) accepts."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": [name, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    """Restore what rng_state() captured (S5)."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class ResumableOrder:
    """What a task's training batcher needs to go on from the middle of an epoch (C5).

    The epoch's batch order is drawn again from the generator's state at the epoch's start,
    the batches already used are left out without being built (no image decoded, no row read),
    and the generator is then put back where it stood after them: crops and flips that draw
    from it go on exactly as in the run that was not stopped.
    """

    generator: torch.Generator
    _resume: tuple[int, torch.Tensor] | None = None

    def resume_at(self, used: int, epoch_state: torch.Tensor, state: torch.Tensor) -> None:
        """Make the next epoch start after its first `used` batches. `epoch_state` is the
        generator's state when that epoch began, `state` its state after those batches."""
        self.generator.set_state(epoch_state)
        self._resume = (used, state)

    def unused(self, batches: list) -> list:
        """This epoch's batches, just drawn, less those that a resumed epoch used already."""
        if self._resume is None:
            return batches
        used, state = self._resume
        self._resume = None
        # After the order is drawn, never before: the order comes from the epoch's first state.
        self.generator.set_state(state)
        return batches[used:]
