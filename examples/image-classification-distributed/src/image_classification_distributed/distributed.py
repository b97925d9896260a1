"""Data-parallel training: the process group, each rank's share of the data, and shared sums."""

import gc
import os
import random
import signal
import sys
import threading
import time
from dataclasses import dataclass
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from .inputs import DataError
from .interface import Data


@dataclass(frozen=True)
class Context:
    """Where this process stands: rank 0 of 1 when started without torchrun."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        """Rank 0 alone writes files and prints progress (M5)."""
        return self.rank == 0

    @property
    def launched(self) -> bool:
        return in_group()


ONE_PROCESS = Context()  # a run without torchrun


def launched_rank() -> int:
    """This process's rank as torchrun numbers it (0 without torchrun), known before start()."""
    return int(os.environ.get("RANK", "0"))


def in_group() -> bool:
    """Whether this process is in a process group (under torchrun, after start())."""
    return dist.is_available() and dist.is_initialized()


def start(device: torch.device, timeout_s: float) -> tuple[Context, torch.device]:
    """Join the process group that torchrun set up; a plain `python -m` run stays one process.

    On CUDA each process takes the GPU numbered by its LOCAL_RANK and talks over NCCL; on the
    CPU over gloo. A collective that waits longer than `timeout_s` (a rank crashed, or took
    another branch) raises instead of hanging (M8).
    """
    if "WORLD_SIZE" not in os.environ:
        return ONE_PROCESS, device
    ctx = Context(
        rank=int(os.environ["RANK"]),
        world_size=int(os.environ["WORLD_SIZE"]),
        local_rank=int(os.environ.get("LOCAL_RANK", 0)),
    )
    if device.type == "cuda":
        device = torch.device("cuda", ctx.local_rank)
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group(
            backend="nccl" if device.type == "cuda" else "gloo",
            timeout=timedelta(seconds=timeout_s),
            device_id=device if device.type == "cuda" else None,
        )
    if "TORCHELASTIC_RUN_ID" in os.environ:  # set by torchrun for the processes it starts
        watch_launcher(ctx)
    return ctx, device


def watch_launcher(ctx: Context, every_s: float = 1.0) -> None:
    """Stop this process when torchrun, its parent, is gone.

    torchrun starts each rank in a session of its own, so killing torchrun's process group
    (`kill -9 -PGID`, an OOM killer, a crashed agent) does not reach the ranks: they would
    train on without a launcher, writing into --out while a new run may be started there. A
    thread that sees the parent change raises SIGHUP in this process, which stops the run as
    a closed terminal does (the kept epochs are saved, exit 129). Polling the parent costs
    nothing measurable; Linux's PR_SET_PDEATHSIG would also fire when the agent's thread
    that started the rank ends, which is not the agent's end.

    Rank 0 says that torchrun is gone just before its stop line (`launcher_gone`): the ranks
    stop on whichever of them sees it first, so its own watch may not have fired yet. On
    another machine, where rank 0's torchrun may be alive, that machine's first rank says it.
    """
    launcher = LAUNCHER["pid"] = os.getppid()

    def watch() -> None:
        while os.getppid() == launcher:
            time.sleep(every_s)
        if ctx.local_rank == 0 and not ctx.is_main:
            print(f"error: {launcher_gone()}; stopping", file=sys.stderr)
            sys.stderr.flush()
        os.kill(os.getpid(), getattr(signal, "SIGHUP", signal.SIGTERM))

    threading.Thread(target=watch, name="launcher-watch", daemon=True).start()


LAUNCHER: dict[str, int | None] = {"pid": None}  # the torchrun that watch_launcher watches


def launcher_gone() -> str | None:
    """Why this rank stops, once the launcher it watches has exited: else None."""
    launcher = LAUNCHER["pid"]
    if launcher is None or os.getppid() == launcher:
        return None
    return f"torchrun (pid {launcher}) is gone"


def stop(ok: bool) -> None:
    """Leave the process group on every exit path, after the DDP wrapper is gone.

    A wrapper still alive when the group is destroyed made 10-50% of good runs abort at exit
    (measured with gloo): its last references are collected first, and after a good run every
    rank waits for the others, so none tears the group down under a rank still finishing.
    """
    if not in_group():
        return
    gc.collect()
    if ok:
        dist.barrier()
    dist.destroy_process_group()


def seed_rank(seed: int, rank: int, epoch: int = 0) -> None:
    """Give rank > 0 its own random streams (dropout, augmentation), derived from the seed.

    Every rank builds the model from the same seed first, so the weights start equal (DDP also
    broadcasts rank 0's); after that, equal streams would drop the same units and draw the same
    crops on every rank. Rank 0 keeps the seed's own streams, so one process trains exactly as
    the project does without torchrun.
    """
    if rank == 0:
        return
    derived = int(np.random.SeedSequence([seed, rank, epoch]).generate_state(1)[0])
    random.seed(derived)
    np.random.seed(derived)
    torch.manual_seed(derived)  # the CPU and every CUDA device


def even_out(batches: list[torch.Tensor], ctx: Context) -> list[torch.Tensor]:
    """The global batches of an epoch, each with at least one sample per rank.

    A batch smaller than the number of ranks (the last one, or the end of a length bucket)
    joins the batch before it: no rank may sit out a step, since every backward waits for all
    ranks, and an empty part would give a NaN loss.
    """
    if ctx.world_size == 1:
        return batches
    merged: list[torch.Tensor] = []
    for index in batches:
        if merged and (len(index) < ctx.world_size or len(merged[-1]) < ctx.world_size):
            merged[-1] = torch.cat([merged[-1], index])
        else:
            merged.append(index)
    return merged


def shard_training(batches: list[torch.Tensor], ctx: Context) -> list[torch.Tensor]:
    """This rank's part of each global batch of sample indices: every world_size-th one (M1).

    Every rank draws the same permutation (one seeded generator, the same draws), so the parts
    are disjoint and together hold every sample once per epoch: nothing is repeated to even out
    the shards. Parts differ in size by at most one sample; average_by_samples makes the
    update exact all the same (M2).
    """
    batches = even_out(batches, ctx)
    return [index[ctx.rank :: ctx.world_size] for index in batches]


def shard_validation(order: torch.Tensor, ctx: Context) -> torch.Tensor:
    """This rank's samples of a validation pass: each sample on exactly one rank (M3).

    A DistributedSampler would repeat samples to give every rank the same count, and count
    them twice in the metrics; here ranks may take different numbers of batches, which
    is safe because validation never calls the DDP wrapper.
    """
    return order[ctx.rank :: ctx.world_size]


def check_shares(data: Data, ctx: Context) -> None:
    """Refuse splits with fewer samples than processes: each process needs at least one."""
    for name, split in (("training", data.train), ("validation", data.val)):
        if len(split.targets) < ctx.world_size:
            raise DataError(
                f"the {name} split has {len(split.targets)} samples, fewer than the "
                f"{ctx.world_size} processes; each process needs at least one"
            )


def data_parallel(module: torch.nn.Module, device: torch.device, ctx: Context) -> torch.nn.Module:
    """What training calls: under torchrun the DDP wrapper, which broadcasts rank 0's weights
    to every rank (M6) and exchanges the gradients in backward; in one process the module.

    Validation and checkpoints use the plain module: no hang on uneven validation shards, no
    "module." prefix in the saved state (M5)."""
    if not ctx.launched:
        return module
    ids = [device.index] if device.type == "cuda" else None
    trainer = DistributedDataParallel(module, device_ids=ids)
    average_by_samples(trainer)  # M2: the whole global batch's gradient, uneven parts too
    return trainer


class SampleCount:
    """The number of samples in the model's last forward pass: the first input's length."""

    def __init__(self) -> None:
        self.last = 0

    def record(self, module: torch.nn.Module, inputs: tuple) -> None:
        self.last = len(inputs[0])


def average_by_samples(trainer: DistributedDataParallel) -> None:
    """Make DDP's gradient exchange give the gradient of the mean loss over the global batch.

    DDP's own exchange averages the ranks' gradients: the mean of each rank's mean loss, which
    is the mean over the global batch only when every rank's part has the same size. Here each
    rank's gradient is weighted by its number of samples, and the sum is divided by the total,
    sent in the same exchange: exactly what one process computes on the whole batch (M2),
    whatever the sizes of the parts, and whatever the training loop looks like.
    """
    count = SampleCount()
    trainer.module.register_forward_pre_hook(count.record)
    trainer.register_comm_hook(count, _sample_weighted_sum)


def _sample_weighted_sum(
    count: SampleCount, bucket: dist.GradBucket
) -> torch.futures.Future[torch.Tensor]:  # DDP checks this annotation
    gradients = bucket.buffer()
    packed = torch.cat([gradients * count.last, gradients.new_tensor([count.last])])
    sent = dist.all_reduce(packed, async_op=True).get_future()

    def unpack(future: torch.futures.Future) -> torch.Tensor:
        total = future.value()[0]
        return total[:-1] / total[-1]

    return sent.then(unpack)


def sum_over_ranks(values: torch.Tensor) -> torch.Tensor:
    """The element-wise sum of `values` over all ranks (itself in one process); one collective.

    Metrics are sums and counts added over ranks, then divided (M3): a mean of per-rank means
    weighs a rank's samples by how many the rank had.
    """
    if in_group():
        values = values.clone()
        dist.all_reduce(values, op=dist.ReduceOp.SUM)
    return values


def max_over_ranks(values: torch.Tensor) -> torch.Tensor:
    """The element-wise maximum of `values` over all ranks (itself in one process).

    How the ranks agree to stop (C5, M8): on the highest signal number any rank received, so
    every rank stops on the same signal and rank 0 names one that came, even when it came to
    another rank only (a scheduler that signals one process, a rank that saw torchrun gone
    first).
    """
    if in_group():
        values = values.clone()
        dist.all_reduce(values, op=dist.ReduceOp.MAX)
    return values


def sync_buffers(*models: torch.nn.Module) -> None:
    """Copy rank 0's buffers (BatchNorm's running statistics) of each model to every rank.

    Each rank's last training step updated them from its own part of the batch; validation
    and the checkpoint must use one set, the one rank 0 saves.
    """
    if in_group():
        for model in models:
            for buffer in model.buffers():
                dist.broadcast(buffer, src=0)


def gather(obj) -> list:
    """`obj` from every rank, in rank order ([obj] in one process)."""
    if not in_group():
        return [obj]
    objects = [None] * dist.get_world_size()
    dist.all_gather_object(objects, obj)
    return objects


def barrier() -> None:
    """Wait until every rank gets here (nothing to wait for in one process)."""
    if in_group():
        dist.barrier()


def share_outcome(ctx: Context, action):
    """Run `action` on rank 0 only, and raise its error on every rank; returns what it
    returned on rank 0, None on the others.

    Rank 0 alone prepares the output folder; a refusal there must stop the other ranks too,
    at once, rather than leave them waiting for rank 0 until the timeout.
    """
    error, result = None, None
    if ctx.is_main:
        try:
            result = action()
        except Exception as err:  # sent to every rank, raised on each below
            error = err
    if ctx.world_size > 1:
        sent = [error]
        dist.broadcast_object_list(sent, src=0)
        error = sent[0]
        if error is not None and not ctx.is_main:
            # One line of it on stderr, rank 0's (an attribute of this error only).
            error.told_by_rank_0 = True  # type: ignore[attr-defined]
    if error is not None:
        raise error
    return result


def tells_how_it_stopped() -> bool:
    """Rank 0 alone says how a stopped run ended (M5): the other ranks, which write nothing,
    could only repeat its line or contradict it. When torchrun is gone, it says so first."""
    if launched_rank() != 0:
        return False
    if gone := launcher_gone():
        print(f"error: {gone}; stopping", file=sys.stderr)
    return True
