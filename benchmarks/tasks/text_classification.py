"""Text-task benchmark parts: a floor over the same padded batches, bucketed against
unbucketed batching, the textbook pad-per-batch loader, and a long-tailed length set.

benchmarks/run.py imports this module for the text task and merges the loops below into the
generic ones. The generic floor reads the training split as one tensor padded to its longest
document, which pads far more than the project's own batches; so the "(a) floor" returned here
replaces it under the same name: the five-line step over the very batches the generated
Batches yields (same seed, same order, same padding), made once before timing, so that the
padding work is left out of the floor and the ratio measures the loop alone.
"""

import dataclasses
import importlib
import statistics
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader

# Sizes measured for this task: name -> (settings, epochs per timed measurement). A step over
# the default synthetic documents (10-45 words, batch 64) costs ~15 ms on one core; the long-
# tailed set in timings() is the second, costlier case, so no larger size here.
SIZES = {"default": ({}, 2)}

# Epoch orders of padded batches the floor holds in memory: the warm-up and 7 repetitions of
# 2 epochs read 15; later epochs cycle through them again.
EPOCH_ORDERS = 16

# The long-tailed length set: lognormal document lengths (median 100 tokens), cut at 256 like
# the default max_length, half as many documents as the size's n_samples.
LONG_MEDIAN, LONG_SIGMA, LONG_MAX = 100, 0.6, 256


def padding_share(project, split, batch_size: int, seed: int) -> float:
    """The share of the ids in one training epoch's batches that are <pad>."""
    batches = project.data.Batches(split, batch_size, shuffle=True, seed=seed)
    real = padded = 0
    for index in batches.batch_indices():
        lengths = split.lengths[index]
        real += int(lengths.sum())
        padded += len(index) * int(lengths.max())
    return 1 - real / padded


def floor_loop(project, cfg, data, split):
    """(a): the five-line step with AdamW over padded batches already in memory: the generated
    Batches' output for EPOCH_ORDERS epochs, drawn before timing with the generated loop's seed."""
    model = project.model.build_model(cfg, data.input_shape, data.task.output_dim)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    batches = project.data.Batches(split, cfg.batch_size, shuffle=True, seed=cfg.seed)
    epochs_in_memory = [list(batches) for _ in range(EPOCH_ORDERS)]
    loss_fn, done = data.task.loss, 0

    def run(epochs: int) -> int:
        nonlocal done
        steps = 0
        for _ in range(epochs):
            for ids, targets in epochs_in_memory[done % EPOCH_ORDERS]:
                optimizer.zero_grad()
                loss = loss_fn(model(ids), targets)
                loss.backward()
                optimizer.step()
                steps += 1
            done += 1
        return steps

    return run


def generated_loop(project, cfg, data, split):
    """(b): the project's own train_one_epoch over its own Batches of this split."""
    model = project.model.build_model(cfg, data.input_shape, data.task.output_dim)
    optimizer = project.train.build_optimizer(model, cfg)
    batches = project.data.Batches(split, cfg.batch_size, shuffle=True, seed=cfg.seed)

    def run(epochs: int) -> int:
        for _ in range(epochs):
            project.engine.train_one_epoch(model, batches, optimizer, data.task)
        return epochs * len(batches)

    return run


def textbook_padded_loop(project, cfg, data):
    """(c): a list of per-document id tensors, DataLoader(shuffle=True) with a collate_fn that
    pads each batch to its longest document (pad_sequence), loss.item() every step."""
    pad = importlib.import_module(f"{project.package}.tokens").PAD
    split = data.train
    items = list(
        zip(
            split.tokens.split(split.lengths.tolist()),
            split.targets.tolist(),
            strict=True,
        )
    )

    def collate(batch):
        ids, targets = zip(*batch, strict=True)
        padded = torch.nn.utils.rnn.pad_sequence(ids, batch_first=True, padding_value=pad)
        return padded, torch.tensor(targets)

    model = project.model.build_model(cfg, data.input_shape, data.task.output_dim)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    loader = DataLoader(items, cfg.batch_size, shuffle=True, collate_fn=collate)

    def run(epochs: int) -> int:
        steps, total = 0, 0.0
        for _ in range(epochs):
            model.train()
            for x, y in loader:
                optimizer.zero_grad()
                loss = data.task.loss(model(x), y)
                loss.backward()
                optimizer.step()
                total += loss.item()
                steps += 1
        return steps

    return run


def _percent(share: float) -> str:
    return f"{100 * share:.0f}% padding"


def loops(project, cfg, data, tmp: Path) -> dict:
    """The floor over the same padded batches (replacing the generic one), the generated loop
    without bucketing, and the textbook loader that pads per batch."""
    bucketed = data.train
    unbucketed = dataclasses.replace(bucketed, bucket_batches=1)
    whole = 1 - bucketed.lengths.float().mean().item() / bucketed.lengths.max().item()
    shares = (
        _percent(padding_share(project, bucketed, cfg.batch_size, cfg.seed)),
        _percent(padding_share(project, unbucketed, cfg.batch_size, cfg.seed)),
    )
    return {
        "(a) floor": floor_loop(project, cfg, data, bucketed),
        f"(b) generated, unbucketed (bucket_batches 1: {shares[1]}, "
        f"bucketed {bucketed.bucket_batches}: {shares[0]})": generated_loop(
            project, cfg, data, unbucketed
        ),
        f"(c) textbook DataLoader, pad_sequence per batch (about {shares[1]}; the plain "
        f"textbook row pads to the split's longest: {_percent(whole)})": textbook_padded_loop(
            project, cfg, data
        ),
    }


def long_tailed_split(project, data, count: int):
    """count documents of random known words with lognormal lengths and random classes."""
    generator = torch.Generator().manual_seed(0)
    lengths = (
        torch.randn(count, generator=generator)
        .mul(LONG_SIGMA)
        .add(torch.log(torch.tensor(float(LONG_MEDIAN))))
        .exp()
        .round()
        .clamp(1, LONG_MAX)
        .long()
    )
    vocabulary = len(data.vocabulary)
    ids = [torch.randint(2, vocabulary, (int(n),), generator=generator).tolist() for n in lengths]
    targets = torch.randint(data.task.output_dim, (count,), generator=generator)
    return project.data.Split.from_ids(ids, targets, data.train.bucket_batches)


def timings(project, cfg, data, tmp: Path, repetitions: int) -> list[tuple[str, list[float]]]:
    """Seconds per training epoch over the long-tailed length set: the floor over the same
    padded bucketed batches, the generated loop bucketed, and unbucketed; interleaved."""
    count = max(cfg.n_samples // 2, cfg.batch_size)
    bucketed = long_tailed_split(project, data, count)
    unbucketed = dataclasses.replace(bucketed, bucket_batches=1)
    runs = {
        "floor": floor_loop(project, cfg, data, bucketed),
        "bucketed": generated_loop(project, cfg, data, bucketed),
        "unbucketed": generated_loop(project, cfg, data, unbucketed),
    }
    for run in runs.values():  # warm-up
        run(1)
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repetitions):
        for name, run in runs.items():
            started = time.perf_counter()
            run(1)
            seconds[name].append(time.perf_counter() - started)
    median = {name: statistics.median(values) for name, values in seconds.items()}
    lengths = bucketed.lengths.float()
    about = (
        f"{count} long-tailed documents (lognormal lengths, median {lengths.median():.0f}, "
        f"mean {lengths.mean():.0f}, cut at {LONG_MAX}), batch {cfg.batch_size}"
    )
    bucketed_share = _percent(padding_share(project, bucketed, cfg.batch_size, cfg.seed))
    unbucketed_share = _percent(padding_share(project, unbucketed, cfg.batch_size, cfg.seed))
    return [
        (
            f"{about}: one epoch, floor over the same padded batches as the next row",
            seconds["floor"],
        ),
        (
            f"the same: one epoch, generated, bucketed ({bucketed.bucket_batches} batches: "
            f"{bucketed_share}; {median['floor'] / median['bucketed']:.2f} of the floor's "
            "steps/s)",
            seconds["bucketed"],
        ),
        (
            f"the same: one epoch, generated, unbucketed (bucket_batches 1: {unbucketed_share}; "
            f"{median['bucketed'] / median['unbucketed']:.2f} of bucketed's steps/s)",
            seconds["unbucketed"],
        ),
    ]
