"""M1-M8: two processes under torchrun (gloo, CPU) train as one process does, and agree."""

import pytest
import torch

import ddp_runs
import task_cases
from image_classification_distributed import train
from image_classification_distributed.config import load_config
from image_classification_distributed.data import Batches, load_data
from image_classification_distributed.distributed import Context
from image_classification_distributed.engine import evaluate
from image_classification_distributed.model import build_model

# What the distributed test files share (tests/ddp_runs.py).
SETTINGS = ddp_runs.SETTINGS
EPOCHS = ddp_runs.EPOCHS
WEIGHT_TOLERANCE = ddp_runs.WEIGHT_TOLERANCE
METRIC_TOLERANCE = ddp_runs.METRIC_TOLERANCE
launch = ddp_runs.launch
launch_exits = ddp_runs.launch_exits
no_prefix = ddp_runs.no_prefix
has_batchnorm = ddp_runs.has_batchnorm
max_difference = ddp_runs.max_difference
two_ranks = ddp_runs.two_ranks


@pytest.mark.parametrize("world_size", [2, 3])
@pytest.mark.parametrize("n", [7, 64, 65, 97])
def test_M1_every_sample_once_per_epoch_and_a_new_order_each_epoch(world_size, n):
    cfg = load_config(None, [*task_cases.SMALL])
    split = load_data(cfg).train
    n = min(n, len(split.targets))
    for batch_size in (8, 10):
        ranks = [
            Batches(split, batch_size, shuffle=True, seed=3, ctx=Context(r, world_size))
            for r in range(world_size)
        ]
        alone = Batches(split, batch_size, shuffle=True, seed=3)
        epochs = []
        for _ in range(2):
            parts = [batches.batch_indices() for batches in ranks]
            steps = {len(p) for p in parts}
            assert len(steps) == 1, f"M1: ranks take {steps} steps; each must take as many"
            seen = torch.cat([index for p in parts for index in p]).sort().values
            # The samples one process takes in the epoch (a task may leave a remainder out).
            once = torch.cat(alone.batch_indices()).sort().values
            assert torch.equal(seen, once), "M1: samples repeated or left out in an epoch"
            for step in range(len(parts[0])):
                sizes = [len(p[step]) for p in parts]
                assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1, sizes
            # Each global batch: the union of the ranks' parts at one step.
            steps = range(len(parts[0]))
            epochs.append({frozenset(torch.cat([p[i] for p in parts]).tolist()) for i in steps})
        assert epochs[0] != epochs[1], "M1: the same batches in two epochs (R15)"
        # Validation: every sample on exactly one rank.
        val = [
            Batches(split, batch_size, shuffle=False, ctx=Context(r, world_size))
            for r in range(world_size)
        ]
        seen = torch.cat([index for b in val for index in b.batch_indices()]).sort().values
        assert torch.equal(seen, torch.arange(len(split.targets))), "M3: validation shards"


def test_M2_the_exchanged_gradient_is_the_whole_batch_gradient(tmp_path):
    # A global batch of 7 samples over 2 ranks (parts of 4 and 3): DDP's own average of the
    # ranks' gradients would weigh rank 1's 3 samples like rank 0's 4.
    records = launch(tmp_path, 2, env={"M2_PROBE": "7"}, rule="M2")
    exchanged = records[0]["probe"]
    assert torch.equal(exchanged, records[1]["probe"]), "M2: the ranks got different gradients"
    cfg = load_config(None, [*task_cases.SMALL, "dropout=0"])
    data = load_data(cfg)
    torch.manual_seed(0)
    model = build_model(cfg, data.input_shape, data.task.output_dim).eval()
    inputs, targets = next(iter(Batches(data.train, 7, shuffle=False)))
    data.task.loss(model(inputs), targets).backward()
    whole = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    error = ((exchanged - whole).norm() / whole.norm()).item()
    assert error <= 1e-5, (
        f"M2: the gradient the ranks exchanged is {error:.1e} (relative) from the gradient of "
        "the mean loss over the whole global batch"
    )


def test_two_processes_end_where_one_process_ends(two_ranks, tmp_path):
    records = two_ranks["records"]
    # M6: the ranks hold the same weights (DDP keeps them in step).
    difference = max_difference(records[0]["weights"], records[1]["weights"])
    # Unequal weights: the ranks took different decisions (M3, M4) or broke DDP's sync (M6).
    assert difference == 0.0, f"M3/M4/M6: the ranks' weights differ by {difference:.2e}"
    # M5: rank 0 alone writes.
    assert records[1]["writes"] == [], f"M5: rank 1 wrote {sorted(set(records[1]['writes']))}"
    assert records[0]["writes"].count("last.pt") == EPOCHS
    # M1, recorded in the real run: each epoch every training sample once across the ranks.
    cfg = load_config(None, [*task_cases.SMALL])
    alone = Batches(load_data(cfg).train, 25, shuffle=True, seed=cfg.seed)
    assert len(records[0]["batches"]) == EPOCHS
    for epoch in range(EPOCHS):
        seen = sorted(i for r in records for batch in r["batches"][epoch] for i in batch)
        once = sorted(torch.cat(alone.batch_indices()).tolist())  # one process's epoch
        assert seen == once, f"M1: epoch {epoch + 1} repeats or drops samples"
    # M5: rank 1 read last.pt right after training: whole and of the last epoch.
    read = [r["read_epoch"] for r in records]
    assert read == [EPOCHS, EPOCHS], f"M5: ranks read last.pt of epochs {read} after training"

    # M3, M4: every rank logged the same metrics, those of the whole validation split: the
    # saved weights validated in one process give the last epoch's numbers.
    assert records[0]["history"] == records[1]["history"], "M3/M4: the ranks' metrics differ"
    no_prefix(two_ranks["out"] / "last.pt")
    two = torch.load(two_ranks["out"] / "last.pt", weights_only=False)
    settings = [*task_cases.SMALL, "dropout=0", "batch_size=25", "val_batch_size=25"]
    settings += [f"epochs={EPOCHS}", "device=cpu"]
    cfg = load_config(None, settings)
    data = load_data(cfg)
    model = build_model(cfg, data.input_shape, data.task.output_dim)
    model.load_state_dict(two["model"])
    val_batches = Batches(data.val, cfg.batch_size, shuffle=False)
    whole = evaluate(model, val_batches, data.task)
    last = two["history"][-1]
    assert "val_loss" in last
    for key, value in whole.items():
        if f"val_{key}" not in last:
            continue
        logged = last[f"val_{key}"]
        assert logged == pytest.approx(value, rel=METRIC_TOLERANCE, abs=1e-7), (
            f"M3: val_{key} of the last epoch is {logged} in 2 processes; the saved weights "
            f"give {value} on the whole validation split"
        )

    one = train.fit(load_config(None, [*settings, f"out={tmp_path / 'one'}"]))
    if has_batchnorm(one["model"]):
        # M7: each rank normalised with its own part of the batch, so the run differs from one
        # process by design; the checks above (equal ranks, metrics of the whole split) hold.
        return
    # last.pt of each: the last epoch's weights (the model fit returns may be the best epoch's).
    one_last = torch.load(tmp_path / "one" / "last.pt", weights_only=False)
    difference = max_difference(one_last["model"], two["model"])
    print(f"2 processes against 1: largest weight difference {difference:.2e}")
    assert difference <= WEIGHT_TOLERANCE, f"M2: 2 processes end {difference:.2e} from 1"
    for mine, theirs in zip(one["history"], two["history"], strict=True):
        for key, value in mine.items():
            assert theirs[key] == pytest.approx(value, rel=METRIC_TOLERANCE), (
                f"M3/M4: epoch {mine['epoch']} {key} is {theirs[key]} in 2 processes, {value} in 1"
            )


@pytest.mark.probe
@pytest.mark.parametrize("at", ["3", "agreeing"])
def test_a_signal_to_one_rank_inside_an_epoch_stops_both_and_resumes_to_the_same_bits(
    two_ranks, tmp_path, at
):
    # C5, M8: rank 1 alone gets SIGHUP (SIGTERM acts the same), after its 3rd step or while
    # the ranks first agree (after their all-reduce said "no signal"). The ranks act on it
    # together at their next agreement: every 10 steps of the run and at the end of an
    # epoch's steps, then after its validation. They save that step, and both stop on SIGHUP,
    # which rank 0 names though it came to rank 1.
    run = ["--epochs", str(EPOCHS), "--out", str(tmp_path / "run")]
    signal_at = {"SIGNAL_AT_STEP": f"SIGHUP:{at}"}
    stderr = launch_exits(1, 2, *SETTINGS, *run, env=signal_at, rule="C5/M8")
    ours = [line for line in stderr.splitlines() if line.startswith(("stopped", "interrupted"))]
    assert len(ours) == 1 and ours[0].startswith("stopped by SIGHUP at epoch "), (
        "C5/M8: the ranks did not stop together on rank 1's SIGHUP:\n" + stderr[-3000:]
    )
    last = tmp_path / "run" / "last.pt"
    saved = torch.load(last, weights_only=False)
    per_epoch = two_ranks["records"][0]["steps_per_epoch"]
    if at == "3":
        agreed = min(s for s in range(3, 11) if s % 10 == 0 or s % per_epoch == 0)
    else:  # it landed at step min(10, per_epoch); the next agreement is the same step
        agreed = per_epoch if per_epoch <= 10 else min(20, per_epoch)  # or the next one
    # An epoch's end, after validation, saves the epoch whole; a step, its place in the epoch.
    steps = saved["position"]["steps"] if "position" in saved else 0
    assert saved["global_step"] == saved["epoch"] * per_epoch + steps == agreed, (
        saved["global_step"],
        agreed,
    )
    # Resumed in two processes: exactly where the uninterrupted run ends.
    stopped = last.with_name("stopped.pt")
    stopped.write_bytes(last.read_bytes())
    again = launch(tmp_path, 2, *SETTINGS, "--epochs", str(EPOCHS), "--resume", str(last))
    difference = max_difference(again[0]["weights"], two_ranks["records"][0]["weights"])
    assert difference == 0.0, f"C5: resumed in 2 processes, {difference:.2e} off"
    if "position" in saved:
        # Each rank's place in the epoch: one process cannot take it up, and says so.
        last.write_bytes(stopped.read_bytes())
        code = train.main([*SETTINGS, "--epochs", str(EPOCHS), "--resume", str(last)])
        assert code == 2
