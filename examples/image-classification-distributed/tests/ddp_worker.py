"""One rank of a torchrun launch from tests/ddp_runs.py, with a record of what it did.

Runs the project's `train` module with ARGS as this rank and saves to $RECORD/rank<N>.pt the
sample indices of each training batch it took, the files it wrote, its final weights,
its number of epochs, and the epoch of the last.pt it read back right after training.
$VAL_OFFSETS=fall (or rise) adds a different offset to each rank's validation loss, falling on
one rank and rising on the other, so a decision made on one rank's own loss would differ
between the ranks.
$CTRL_C_IN_EPOCH=N raises KeyboardInterrupt on every rank in epoch N, $CRASH_IN_EPOCH=N an
error on rank 1 alone. $SIGNAL_AT_STEP=NAME:N sends signal NAME (SIGTERM, SIGHUP) to rank 1
alone after its Nth optimizer step; NAME:agreeing sends it to rank 1 alone while the ranks
first agree inside an epoch, just after their all-reduce returns. $M2_PROBE=N only runs
one backward pass on this rank's part of the first N samples and saves the gradient.
$UNSHARED=1 makes rank 1 see no last.pt, as a machine that does not share --out's files.
"""

import os
import signal
import sys
import time
from pathlib import Path

import torch

import task_cases
from image_classification_distributed import (
    data,
    distributed,
    midepoch,
    progress,
    run_files,
    train,
)

RANK = int(os.environ["RANK"])
record: dict = {"batches": [], "epochs": 0, "writes": []}

drawn = data.Batches.batch_indices


def recording_batch_indices(self, draw: bool = True):
    parts = drawn(self, draw)
    if self.shuffle and draw:  # one training epoch's draw
        record["batches"].append([part.tolist() for part in parts])
    return parts


data.Batches.batch_indices = recording_batch_indices

saved, wrote_metrics = run_files.save_checkpoint, run_files.write_metrics


def slow_save_checkpoint(state, path):
    record["writes"].append(Path(path).name)
    time.sleep(0.3)  # written late: a rank that reads without waiting sees an old file
    saved(state, path)


def recording_write_metrics(path, history):
    record["writes"].append(Path(path).name)
    wrote_metrics(path, history)


run_files.save_checkpoint, run_files.write_metrics = slow_save_checkpoint, recording_write_metrics

if os.environ.get("VAL_OFFSETS"):
    validated = {"epochs": 0}
    evaluate, add = train.evaluate, progress.EpochSums.add

    def counting_evaluate(*args, **kwargs):
        validated["epochs"] += 1
        return evaluate(*args, **kwargs)

    # Per sample and epoch, "fall": -50 on rank 0, +5 on rank 1 (the sum falls); "rise": the
    # other way round (the sum rises).
    sign = 1.0 if os.environ["VAL_OFFSETS"] == "fall" else -1.0

    def offset_add(self, loss, outputs, targets):
        offset = sign * (-50.0 if RANK == 0 else 5.0) * validated["epochs"]
        add(self, loss + offset, outputs, targets)

    train.evaluate = counting_evaluate
    progress.EpochSums.add = offset_add

if os.environ.get("CTRL_C_IN_EPOCH") or os.environ.get("CRASH_IN_EPOCH"):
    # Ctrl-C on every rank in this epoch, after its training steps (as a terminal sends it
    # to every process of the launch), or an error on rank 1 alone.
    stop_in = int(os.environ.get("CTRL_C_IN_EPOCH") or os.environ["CRASH_IN_EPOCH"])
    synced = {"epochs": 0}
    sync_buffers = distributed.sync_buffers

    def interrupting_sync_buffers(*models):  # called once per epoch, with every model
        synced["epochs"] += 1
        if synced["epochs"] == stop_in and os.environ.get("CTRL_C_IN_EPOCH"):
            raise KeyboardInterrupt
        if synced["epochs"] == stop_in and RANK == 1:
            raise RuntimeError("rank 1 crashed (injected by the test)")
        sync_buffers(*models)

    distributed.sync_buffers = interrupting_sync_buffers  # train.py calls it once an epoch

if os.environ.get("M2_PROBE"):
    # One backward through DDP on this rank's part of the first N training samples, in eval
    # mode (BatchNorm with its running statistics, so samples do not depend on each other).
    from image_classification_distributed.config import load_config
    from image_classification_distributed.distributed import (
        average_by_samples,
        start,
        stop,
    )
    from image_classification_distributed.model import build_model

    ctx, device = start(torch.device("cpu"), 30)
    cfg = load_config(None, [*task_cases.SMALL, "dropout=0"])
    loaded = data.load_data(cfg)
    torch.manual_seed(0)
    model = build_model(cfg, loaded.input_shape, loaded.task.output_dim).eval()
    trainer = torch.nn.parallel.DistributedDataParallel(model)
    average_by_samples(trainer)
    size = int(os.environ["M2_PROBE"])
    inputs, targets = next(iter(data.Batches(loaded.train, size, shuffle=False)))
    part = slice(ctx.rank, None, ctx.world_size)
    loaded.task.loss(trainer(inputs[part]), targets[part]).backward()
    gradients = [p.grad.flatten() for p in model.parameters() if p.grad is not None]
    record["probe"] = torch.cat(gradients)
    torch.save(record, Path(os.environ["RECORD"]) / f"rank{RANK}.pt")
    del trainer
    stop(ok=True)
    sys.exit(0)

if os.environ.get("SIGNAL_AT_STEP"):
    # As a scheduler that signals one process: every rank must save and stop together (C5).
    name, at = os.environ["SIGNAL_AT_STEP"].split(":")
    number = getattr(signal, name)
    if at == "agreeing":
        agree, sent = midepoch.max_over_ranks, []

        def agreeing(values):
            agreed = agree(values)  # the ranks agreed that no signal came, so far
            if RANK == 1 and not sent:
                sent.append(number)
                os.kill(os.getpid(), number)  # its handler runs before this function returns
            return agreed

        midepoch.max_over_ranks = agreeing
    else:
        term_at, steps = int(at), []
        real_train_one_epoch = train.train_one_epoch

        def signalled(*args, after_step, **kwargs):
            def after(progress):
                steps.append(progress.steps)
                if len(steps) == term_at and RANK == 1:
                    os.kill(os.getpid(), number)
                after_step(progress)

            return real_train_one_epoch(*args, after_step=after, **kwargs)

        train.train_one_epoch = signalled

if os.environ.get("UNSHARED") and RANK == 1:
    is_file = Path.is_file
    Path.is_file = lambda self: self.name != "last.pt" and is_file(self)

fit = train.fit


def recording_fit(cfg, *args, **kwargs):
    result = fit(cfg, *args, **kwargs)
    record["weights"] = {k: v.detach().cpu() for k, v in result["model"].state_dict().items()}
    record["epochs"] = len(result["history"])
    record["history"] = result["history"]
    last = torch.load(Path(cfg.out) / "last.pt", map_location="cpu", weights_only=False)
    record["read_epoch"] = last["epoch"]
    record["steps_per_epoch"] = last["global_step"] // max(last["epoch"], 1)
    return result


train.fit = recording_fit
status = train.main(sys.argv[1:])
torch.save(record, Path(os.environ["RECORD"]) / f"rank{RANK}.pt")
sys.exit(status)
