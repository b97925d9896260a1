"""Hyperparameter sweeps with Optuna: each trial is a normal training run in a folder of its own.

    python -m <package>.tune --trials 20                 # the study in runs/sweep/study.db
    python -m <package>.tune --trials 20 --storage postgresql://user@host/db   # many machines

A trial runs `python -m <package>.train` in a child process (or under --launcher, e.g. torchrun)
with the settings the sampler chose, into OUT/trial-NNNN, whose checkpoints and metrics.csv stay.
Its objective is a validation metric at the epoch best.pt holds; every epoch's value goes to the
pruner, and a trial the pruner stops is ended as a SIGTERM ends a run (its epochs kept). The
study lives in its storage: after Ctrl-C, a kill or a reboot, the same command goes on, and a
trial that was cut short runs again from its start. Needs the tune extra (Optuna).
"""

import argparse
import csv
import math
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from .config import Config, ConfigError, load_config
from .model import SEARCH_SPACE as MODEL_SEARCH_SPACE
from .task import METRICS

EXTRA = 'pip install -e ".[tune]"'
EXIT_INPUT = 2  # as train.py: an argument, space file or storage that cannot be used
EXIT_INTERRUPTED = 130

# The settings a sweep tunes, and their ranges: {"low": a, "high": b} (integers when both are;
# "log": true samples on a log scale) or {"choices": [...]}. The model's own are in model.py's
# SEARCH_SPACE. A TOML file given with --space replaces the whole table (see docs/sweeps.md).
SEARCH_SPACE = {
    "lr": {"low": 1e-4, "high": 3e-2, "log": True},
    "weight_decay": {"low": 1e-5, "high": 1e-1, "log": True},
    "batch_size": {"choices": [32, 64, 128]},
    **MODEL_SEARCH_SPACE,
}
POLL_S = 0.5  # how often a running trial's metrics.csv is read for new epochs
HEARTBEAT_S = 30.0  # how often a worker says its trial still runs (in the trial's user attrs)
# A running trial without a heartbeat for this long belongs to a worker that died on another
# machine; one on this machine is known dead at once, by its worker's process id.
STALE_S = 300.0


class TuneError(Exception):
    """An argument, space file or storage that cannot be used: one line, exit 2."""


def default_space() -> dict:
    """SEARCH_SPACE, plus early stopping's patience where the project has it."""
    fields = Config.__dataclass_fields__
    space = {name: spec for name, spec in SEARCH_SPACE.items() if name in fields}
    if "patience" in fields:
        # With the plateau scheduler, early stopping's patience must exceed the plateau's.
        low = fields["plateau_patience"].default + 1 if "plateau_patience" in fields else 2
        space["patience"] = {"low": low, "high": max(low + 1, 10)}
    return space


def read_space(path: str) -> dict:
    """The [space] table of a TOML file."""
    try:
        with open(path, "rb") as f:
            table = tomllib.load(f).get("space")
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise TuneError(f"cannot read the search space {path}: {err}") from None
    if not isinstance(table, dict) or not table:
        raise TuneError(f"{path} has no [space] table of settings to tune")
    return table


def check_space(space: dict) -> None:
    """Refuse, in one line, an entry that names no setting or cannot be sampled."""
    fields = Config.__dataclass_fields__
    for name, spec in space.items():
        if name not in fields:
            raise TuneError(f"the search space names {name!r}, which is not a setting")
        if not isinstance(spec, dict):
            raise TuneError(f"space entry {name}: expected a table with low/high or choices")
        if "choices" in spec:
            if not isinstance(spec["choices"], list) or not spec["choices"]:
                raise TuneError(f"space entry {name}: choices must be a non-empty list")
            continue
        low, high = spec.get("low"), spec.get("high")
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (low, high))
        if not numbers or not math.isfinite(low) or not math.isfinite(high) or low >= high:
            raise TuneError(f"space entry {name}: needs finite numbers low < high")
        if spec.get("log") and low <= 0:
            raise TuneError(f"space entry {name}: a log scale needs low above 0")


def suggest(trial, name: str, spec: dict):
    if "choices" in spec:
        return trial.suggest_categorical(name, spec["choices"])
    log = bool(spec.get("log", False))
    if isinstance(spec["low"], int) and isinstance(spec["high"], int):
        return trial.suggest_int(name, spec["low"], spec["high"], log=log)
    return trial.suggest_float(name, float(spec["low"]), float(spec["high"]), log=log)


def direction_of(metric: str, given: str | None) -> str:
    if given:
        return given
    if metric == "val_loss" or metric in ("val_rmse", "val_mae"):
        return "minimize"
    if metric == "val_accuracy":
        return "maximize"
    raise TuneError(f"say whether {metric} should be minimized or maximized: --direction")


def database(url: str):
    """Optuna's RDBStorage of url. Workers started together on a new database race to create
    its tables, and the losers' inserts fail (a UNIQUE constraint or "already exists"): once
    the winner is done the tables are there, so those errors are tried again, a few times."""
    import optuna
    import sqlalchemy.exc

    for attempt in range(4):
        try:
            return optuna.storages.RDBStorage(url)
        except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.OperationalError) as err:
            racing = isinstance(err, sqlalchemy.exc.IntegrityError) or any(
                words in str(err) for words in ("already exists", "database is locked")
            )
            if not racing:
                raise
        time.sleep(0.2 * (attempt + 1))
    return optuna.storages.RDBStorage(url)  # the last try: its error, if any, is reported


def open_storage(url: str | None, out: Path):
    """Optuna's storage: a SQLite file in OUT by default, a database URL, or a journal file."""
    import optuna

    try:
        if url is None:
            return database(f"sqlite:///{out.resolve() / 'study.db'}")
        if url.startswith("journal:"):
            # One append-only file that many machines can share (NFS and the like).
            backend = optuna.storages.journal.JournalFileBackend(url.removeprefix("journal:"))
            return optuna.storages.JournalStorage(backend)
        return database(url)
    except Exception as err:  # SQLAlchemy's and the drivers' errors have no common base
        message = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise TuneError(f"cannot open the study's storage {url or out}: {message}") from None


def metric_rows(folder: Path) -> list[dict]:
    """The epochs a trial's run has written so far (metrics.csv is replaced whole, atomically)."""
    try:
        with open(folder / "metrics.csv", newline="") as f:
            return list(csv.DictReader(f))
    except FileNotFoundError:
        return []


def best_epoch_value(rows: list[dict], metric: str) -> float:
    """The metric at the epoch best.pt holds: the first with the lowest validation loss."""
    best = min(rows, key=lambda row: float(row["val_loss"]))
    return float(best[metric])


def stop(child: subprocess.Popen) -> None:
    """End a run as a scheduler would (SIGTERM: its finished epochs are kept), then wait."""
    if child.poll() is None:
        child.send_signal(signal.SIGTERM)
    try:
        child.wait(timeout=120)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def last_line(log: Path) -> str:
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def run_trial(trial, command: list[str], folder: Path, metric: str) -> tuple[str, float | None]:
    """Run one trial's training, reporting each epoch to the pruner: (state, objective)."""
    log = folder.with_suffix(".log")
    with open(log, "w") as output:
        child = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
    reported, beat = 0, time.monotonic()
    try:
        while True:
            finished = child.poll() is not None
            rows = metric_rows(folder)
            for row in rows[reported:]:
                trial.report(float(row[metric]), int(row["epoch"]))
            if len(rows) > reported:
                reported = len(rows)
                if not finished and trial.should_prune():
                    stop(child)
                    # An epoch that was validating or saving when the SIGTERM came is finished
                    # and kept (rule C5), so the objective is read from what the run kept.
                    rows = metric_rows(folder) or rows
                    return "pruned", float(rows[-1][metric])
            if finished:
                break
            if time.monotonic() - beat > HEARTBEAT_S:
                trial.set_user_attr("heartbeat", time.time())
                beat = time.monotonic()
            try:
                child.wait(timeout=POLL_S)  # a run that ends is seen at once, not at the next poll
            except subprocess.TimeoutExpired:
                pass
    except BaseException:  # Ctrl-C (a terminal's reaches the child too) or a failure here
        try:
            child.wait(timeout=10)  # a run that got the Ctrl-C saves its epochs and ends
        except subprocess.TimeoutExpired:
            stop(child)
        raise
    if child.returncode == 0 and rows:
        return "complete", best_epoch_value(rows, metric)
    if child.returncode == 3 and rows:  # diverged: judged by the epochs it had, as pruned
        return "pruned", float(rows[-1][metric])
    trial.set_user_attr("failure", last_line(log))
    return "failed", None


def alive_here(attrs: dict) -> bool:
    """Whether a running trial's worker is a live process of this machine."""
    if attrs.get("host") != socket.gethostname() or "pid" not in attrs:
        return False
    try:
        os.kill(attrs["pid"], 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def retry_stale_trials(study) -> None:
    """Fail the running trials whose worker is gone, and queue their settings to run again."""
    import optuna

    for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        attrs = trial.user_attrs
        if "heartbeat" not in attrs:
            # Its worker is between ask() and the last of its attrs (heartbeat is set last):
            # the host may be there without the pid yet. Only its age can tell it is dead.
            started = trial.datetime_start or datetime.now()
            if (datetime.now() - started).total_seconds() < STALE_S:
                continue
        elif attrs.get("host") == socket.gethostname():
            if alive_here(attrs):
                continue
        elif time.time() - attrs["heartbeat"] < STALE_S:
            continue
        try:
            study.tell(trial.number, state=optuna.trial.TrialState.FAIL)
        except (RuntimeError, ValueError):  # another worker got there first
            continue
        study.enqueue_trial(trial.params, user_attrs={"retry_of": trial.number})
        print(f"trial {trial.number} was cut short; its settings run again", flush=True)


def train_command(args, settings: dict, folder: Path) -> list[str]:
    launcher = args.launcher.split() if args.launcher else [sys.executable]
    command = [*launcher, "-m", f"{__package__}.train", "--out", str(folder), "--no-progress"]
    if args.config:
        command += ["--config", args.config]
    # Every epoch's metrics on disk at once, for the pruner (a --set of the user's still wins).
    command += ["--set", "checkpoint_every_s=0"]
    for override in args.overrides:
        command += ["--set", override]
    for name, value in settings.items():
        command += ["--set", f"{name}={value}"]
    return command


def summary(study, args, metric: str) -> str:
    import optuna

    done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    if not done:
        return "no trial has finished yet"
    best = study.best_trial
    command = ["python", "-m", f"{__package__}.train"]
    command += ["--config", args.config] if args.config else []
    for setting in [*args.overrides, *(f"{k}={v}" for k, v in best.params.items())]:
        command += ["--set", setting]
    return (
        f"best: trial {best.number}, {metric} {best.value:.6g}, in {best.user_attrs['folder']}\n"
        f"reproduce: {shlex.join([*command, '--out', 'runs/best'])}"
    )


def run_and_tell(study, trial, args, settings: dict, folder: Path) -> None:
    """Run one asked trial into folder and tell the study how it ended, in one printed line."""
    import optuna

    # One attr per write, and another worker may read them in between: the heartbeat goes
    # last, so a trial without one is known to be still being set up (retry_stale_trials).
    attrs = {"host": socket.gethostname(), "pid": os.getpid(), "folder": str(folder)}
    for key, value in {**attrs, "heartbeat": time.time()}.items():
        trial.set_user_attr(key, value)
    started = time.monotonic()
    state, value = run_trial(trial, train_command(args, settings, folder), folder, args.metric)
    seconds = time.monotonic() - started
    chosen = ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                       for k, v in settings.items())  # fmt: skip
    if state == "complete":
        study.tell(trial, value)
        print(f"trial {trial.number}: {args.metric} {value:.6g} ({chosen}) {seconds:.1f}s")
    elif state == "pruned":
        study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        print(f"trial {trial.number}: pruned ({chosen}) {seconds:.1f}s; files in {folder}")
    else:
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
        print(f"trial {trial.number}: failed: {trial.user_attrs.get('failure', '')} "
              f"({chosen}); see {folder.with_suffix('.log')}")  # fmt: skip


def sweep(args) -> int:
    try:
        import optuna
    except ImportError:
        raise TuneError(f"sweeps need Optuna: {EXTRA}") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # this command prints its own lines
    space = read_space(args.space) if args.space else default_space()
    check_space(space)
    valid = ["val_loss", *(f"val_{name}" for name in METRICS)]
    if args.metric not in valid:
        raise TuneError(f"--metric must be one of {', '.join(valid)}, got {args.metric!r}")
    for override in args.overrides:  # fail here, once, not in every trial
        load_config(args.config, [override])
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise TuneError(f"cannot make the folder {out}: {err.strerror}") from None
    pruner = optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=1)
    if args.no_prune:
        pruner = optuna.pruners.NopPruner()
    study = optuna.create_study(
        storage=open_storage(args.storage, out),
        study_name=args.study,
        direction=direction_of(args.metric, args.direction),
        pruner=pruner,
        load_if_exists=True,
    )
    retry_stale_trials(study)
    states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    while True:
        counted = states + (optuna.trial.TrialState.RUNNING,)
        if len(study.get_trials(deepcopy=False, states=counted)) >= args.trials:
            break
        trial = study.ask()
        # The sampler is seeded by the trial's number: one worker's sweep repeats exactly, and
        # workers sharing a study draw from different streams.
        study.sampler = optuna.samplers.TPESampler(seed=args.seed * 1_000_003 + trial.number)
        settings = {name: suggest(trial, name, spec) for name, spec in space.items()}
        folder = out / f"trial-{trial.number:04d}"
        try:
            run_and_tell(study, trial, args, settings, folder)
        except optuna.exceptions.UpdateFinishedTrialError:
            # Another worker found no heartbeat from this one for STALE_S (a suspended machine)
            # and queued the trial's settings again: the trial is theirs now.
            print(f"trial {trial.number}: ended by another worker, which runs it again")
        except KeyboardInterrupt:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            study.enqueue_trial(trial.params, user_attrs={"retry_of": trial.number})
            print(
                f"interrupted; trial {trial.number} will run again: run the same command to "
                "go on with the study",
                file=sys.stderr,
                flush=True,
            )
            return EXIT_INTERRUPTED
        sys.stdout.flush()
    print(summary(study, args, args.metric), flush=True)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"python -m {__package__}.tune",
        description="Search the settings with Optuna; each trial is a training run of its own.",
    )
    parser.add_argument("--trials", type=int, required=True, help="trials in the study in all")
    parser.add_argument("--out", default="runs/sweep", help="folder of the trials' runs")
    parser.add_argument("--study", default="sweep", help="the study's name in its storage")
    parser.add_argument(
        "--storage",
        metavar="URL",
        help="sqlite:///FILE, postgresql://..., mysql://... or journal:FILE "
        "(default: OUT/study.db); share it to run workers on many machines",
    )
    parser.add_argument("--metric", default="val_loss", help="the validation metric to optimize")
    parser.add_argument("--direction", choices=["minimize", "maximize"])
    parser.add_argument("--space", metavar="FILE", help="TOML file whose [space] table is searched")
    parser.add_argument("--config", metavar="FILE", help="TOML settings every trial starts from")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting fixed for every trial, e.g. --set epochs=10 (repeatable)",
    )
    parser.add_argument("--seed", type=int, default=0, help="the sampler's seed")
    parser.add_argument("--no-prune", action="store_true", help="run every trial to its end")
    parser.add_argument(
        "--launcher",
        metavar="CMD",
        help='how to start python for a trial, e.g. "torchrun --nproc_per_node 2"',
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.trials < 1:
        print("--trials must be at least 1", file=sys.stderr)
        return EXIT_INPUT
    try:
        return sweep(args)
    except (TuneError, ConfigError) as err:
        print(err, file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        print("interrupted; no trial was running", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
