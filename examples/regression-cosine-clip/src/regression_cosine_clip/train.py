"""Training entry point: settings, seed, data, model, optimizer, then the epochs."""

import argparse
import csv
import dataclasses
import math
import sys
import time
from pathlib import Path

import torch

from . import TEMPLATE_VERSION
from .checkpoint import load_checkpoint, save_checkpoint
from .config import Config, ConfigError, dump_config, load_config
from .data import Batches, DataError, load_data
from .engine import evaluate, train_one_epoch
from .model import build_model
from .seed import rng_state, seed_everything, set_rng_state
from .task import METRICS


def resolve_device(name: str) -> torch.device:
    """'auto' is CUDA when torch sees a GPU, the CPU otherwise."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device 'cuda' was asked for, but torch sees no CUDA device")
    return torch.device(name)


def build_optimizer(model: torch.nn.Module, cfg: Config) -> torch.optim.Optimizer:
    # The fused kernel updates every parameter in one pass: faster on the CPU and on CUDA,
    # and it needs the parameters already on their device (R1).
    fused = next(model.parameters()).device.type in ("cpu", "cuda")
    return torch.optim.AdamW(
        model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, fused=fused
    )


def build_scheduler(optimizer: torch.optim.Optimizer, cfg: Config):
    # Stepped once per epoch (R7), so its length is counted in epochs.
    return torch.optim.lr_scheduler.CosineAnnealingLR(
        optimizer, T_max=cfg.epochs, eta_min=cfg.min_lr
    )


def write_metrics(path: Path, history: list[dict]) -> None:
    """Rewrite metrics.csv from the history (a resumed run drops epochs after its checkpoint)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(history[0]))
        writer.writeheader()
        writer.writerows(history)


def format_row(row: dict, improved: bool, seconds: float, epochs: int) -> str:
    metrics = "  ".join(f"{k} {v:.4f}" for k, v in row.items() if k not in ("epoch", "lr"))
    mark = "  *" if improved else ""
    return f"epoch {row['epoch']:>3}/{epochs}  lr {row['lr']:.2e}  {metrics}  {seconds:.2f}s{mark}"


def fit(cfg: Config, checkpoint: dict | None = None) -> dict:
    """Train as configured, resuming from `checkpoint` if given; returns the model and history."""
    seed_everything(cfg.seed, cfg.deterministic)  # S1: before any data, weights or batch order
    device = resolve_device(cfg.device)
    out = Path(cfg.out)

    data = load_data(cfg)
    train_batches = Batches(data.train, cfg.batch_size, shuffle=True, seed=cfg.seed, device=device)
    val_batches = Batches(data.val, cfg.batch_size, shuffle=False, device=device)

    model = build_model(cfg, data.train.features.shape[1], data.task.output_dim)
    model.to(device)  # R1: before the optimizer is built, so it holds the parameters in use
    optimizer = build_optimizer(model, cfg)
    scheduler = build_scheduler(optimizer, cfg)

    start_epoch, best_val_loss, history = 1, math.inf, []
    if checkpoint is not None:  # S5: restore every state, not only the weights
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        scheduler.load_state_dict(checkpoint["scheduler"])
        train_batches.generator.set_state(checkpoint["batch_rng"])
        set_rng_state(checkpoint["rng"])
        start_epoch = checkpoint["epoch"] + 1
        best_val_loss = checkpoint["best_val_loss"]
        history = list(checkpoint["history"])

    for epoch in range(start_epoch, cfg.epochs + 1):
        started = time.perf_counter()
        lr = optimizer.param_groups[0]["lr"]  # the rate this epoch trains with
        train = train_one_epoch(
            model,
            train_batches,
            optimizer,
            data.task,
            max_grad_norm=cfg.max_grad_norm,
        )
        val = evaluate(model, val_batches, data.task)
        scheduler.step()  # R7: once per epoch, after this epoch's optimizer steps

        improved = val["loss"] < best_val_loss  # R13: judged on this epoch's validation loss
        if improved:
            best_val_loss = val["loss"]
        row = {"epoch": epoch, "lr": lr, "train_loss": train["loss"], "val_loss": val["loss"]}
        row.update({f"val_{name}": val[name] for name in METRICS})
        history.append(row)
        write_metrics(out / "metrics.csv", history)

        state = {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "epoch": epoch,
            "global_step": epoch * len(train_batches),
            "best_val_loss": best_val_loss,
            "history": history,
            "rng": rng_state(),
            "batch_rng": train_batches.generator.get_state(),
            "config": dataclasses.asdict(cfg),
            "data": data.state_dict(),
            "template_version": TEMPLATE_VERSION,
        }
        save_checkpoint(state, out / "last.pt")
        if improved:
            save_checkpoint(state, out / "best.pt")
        print(format_row(row, improved, time.perf_counter() - started, cfg.epochs), flush=True)
    return {"model": model, "history": history, "best_val_loss": best_val_loss, "data": data}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"python -m {__package__}.train",
        description="Train the model. Settings: defaults, then --config, then --set, then flags.",
    )
    parser.add_argument("--config", metavar="FILE", help="TOML file of settings")
    parser.add_argument("--epochs", type=int, help="number of epochs")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], help="where to train")
    parser.add_argument("--out", metavar="DIR", help="folder for metrics.csv, last.pt and best.pt")
    parser.add_argument("--seed", type=int, help="random seed (data split, weights, batch order)")
    parser.add_argument("--data", metavar="CSV", help="CSV file (default: synthetic data)")
    parser.add_argument("--target", metavar="NAME", help="CSV column to predict (default: target)")
    parser.add_argument(
        "--resume", metavar="CKPT", help="continue from a checkpoint, e.g. runs/latest/last.pt"
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override any setting, e.g. --set lr=3e-4 (repeatable)",
    )
    parser.add_argument(
        "--print-config", action="store_true", help="print the resolved settings as TOML and exit"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    flags = ("epochs", "device", "out", "seed", "data", "target")
    overrides = args.overrides + [
        f"{name}={getattr(args, name)}" for name in flags if getattr(args, name) is not None
    ]
    try:
        checkpoint = None
        if args.resume:
            try:
                checkpoint = load_checkpoint(args.resume)
            except OSError as err:
                raise ConfigError(f"cannot read checkpoint {args.resume}: {err.strerror}") from None
        # A resumed run starts from the settings it was saved with.
        cfg = load_config(args.config, overrides, base=checkpoint["config"] if checkpoint else None)
        if args.print_config:
            print(dump_config(cfg), end="")
            return 0
        result = fit(cfg, checkpoint)
    except (ConfigError, DataError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"best val_loss {result['best_val_loss']:.4f}; metrics and checkpoints in {cfg.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
