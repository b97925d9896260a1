"""Sanity check: the model, loss and optimizer can memorise one fixed batch."""

import argparse
import dataclasses
import json
import sys
import time

from .config import Config, ConfigError
from .data import Batches, load_data
from .device import resolve_device
from .engine import NonFiniteLoss, evaluate, train_one_epoch
from .model import build_model
from .optim import build_optimizer
from .seed import seed_everything


def overfit_one_batch(cfg: Config, max_steps: int = 500, threshold: float = 0.01) -> dict:
    """Train on one batch until the loss is below `threshold` x its first value and the task
    calls the batch memorised (for classes: every sample right)."""
    # No dropout or weight decay and a brisk learning rate: this checks that the loss,
    # the gradients and the optimizer are wired together; regularisation would only blur it.
    cfg = dataclasses.replace(cfg, dropout=0.0, weight_decay=0.0, lr=1e-2)
    seed_everything(cfg.seed, cfg.deterministic)
    device = resolve_device(cfg.device)
    data = load_data(cfg)
    batch = next(iter(Batches(data.train, cfg.batch_size, shuffle=False, device=device)))
    model = build_model(cfg, data.input_shape, data.task.output_dim)
    model.to(device)  # R1: before the optimizer is built
    optimizer = build_optimizer(model, cfg)

    started = time.perf_counter()
    first = None
    for step in range(1, max_steps + 1):
        # One "epoch" over a one-batch list is one optimizer step through the real training code.
        stats = train_one_epoch(
            model,
            [batch],
            optimizer,
            data.task,
        )
        if step == 1:
            first = stats["loss"]
        if stats["loss"] < threshold * first:
            # The loss is low enough; the task says whether that means learnt by heart.
            metrics = evaluate(model, [batch], data.task)
            if data.task.memorised(metrics):
                break
    metrics = evaluate(model, [batch], data.task)
    passed = stats["loss"] < threshold * first and data.task.memorised(metrics)
    return {
        "device": str(device),
        "first_loss": first,
        "last_loss": stats["loss"],
        "steps": step,
        "seconds": time.perf_counter() - started,
        "passed": passed,
        "metrics": metrics,  # of the batch, in eval mode, after the last step
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {__package__}.overfit", description=__doc__)
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--steps", type=int, default=500, help="most optimizer steps to try")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON line")
    args = parser.parse_args(argv)
    try:
        result = overfit_one_batch(Config(device=args.device), max_steps=args.steps)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except NonFiniteLoss as err:  # one batch at a fixed, modest rate: the model or loss is broken
        print(f"error: overfit one batch FAILED: {err}; check the model and loss", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result))
    else:
        verdict = "passed" if result["passed"] else "FAILED"
        print(
            f"overfit one batch {verdict} on {result['device']}: loss {result['first_loss']:.4f}"
            f" -> {result['last_loss']:.4f} in {result['steps']} steps, {result['seconds']:.1f}s"
        )
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
