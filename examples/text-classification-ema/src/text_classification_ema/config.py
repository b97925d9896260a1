"""Training configuration: typed defaults, then a TOML file, then command-line overrides."""

import codecs
import dataclasses
import json
import math
import os
import stat
import sys
import types
import typing
from dataclasses import dataclass
from pathlib import Path

from .data import DataSettings
from .model import ModelSettings
from .task import TaskSettings

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


class ConfigError(ValueError):
    """A configuration key or value that cannot be used."""


MAX_CONFIG_BYTES = 1 << 20  # a settings file is a few lines; a larger one is not a settings file
SEED_MAX = 2**32 - 1  # numpy's seed range, the narrowest of the generators seeded


@dataclass
class Config(TaskSettings, ModelSettings, DataSettings):  # fields: data, model, task, then these
    """Every setting of a run, with its default and what it does.

    The data, model and task settings are declared beside their code, in data.py, model.py and
    task.py; the training settings below are the same for every task.
    """

    # Optimization
    epochs: int = 20
    batch_size: int = 64  # a multiple of 8 suits tensor cores
    # Validation batches; 0: 4 x batch_size. Validation keeps no graph for backward, so larger
    # batches fit, and on short epochs they make it cheaper. Its metrics are per-sample sums.
    val_batch_size: int = 0
    lr: float = 3e-3  # AdamW learning rate
    weight_decay: float = 1e-2  # AdamW weight decay
    plateau_patience: int = 2  # epochs without improvement before the LR drops
    plateau_factor: float = 0.5  # the LR is multiplied by this when it drops
    min_lr: float = 1e-6  # the plateau schedule never goes below this
    patience: int = 5  # epochs without improvement before training stops
    # Largest decay of the weights' moving average per optimizer update; after n updates it is
    # min(ema_decay, (1 + n) / (10 + n)), so short runs average over their recent steps.
    ema_decay: float = 0.999

    # Run
    seed: int = 42
    device: str = "auto"  # auto (CUDA when available), cpu or cuda
    deterministic: bool = True  # bitwise-repeatable runs; False lets cuDNN pick faster kernels
    out: str = "runs/latest"  # folder for metrics.csv, last.pt and best.pt
    progress: bool = True  # a progress bar per epoch, shown only when the output is a terminal
    tensorboard: bool = False  # scalars per epoch in OUT/tensorboard (needs the tensorboard extra)
    # "mlflow": every setting, each epoch's metrics and the run's files in an MLflow run (needs
    # the mlflow extra), in the store MLFLOW_TRACKING_URI names, else OUT's parent/mlflow.db.
    tracking: str = "none"
    # last.pt, best.pt and metrics.csv are written once this many seconds have passed since
    # their last write: after an epoch, or inside a long epoch after an optimizer step (C5).
    # 0: after every epoch and never inside one. Always after the last epoch, an early stop,
    # Ctrl-C, SIGTERM or a diverged loss; never more often than 50 times a write's own duration
    # (a large model's write stays under 2% of the run). A run killed outright (SIGKILL, power
    # cut) resumes from up to this many seconds back and trains them again, to the same result.
    checkpoint_every_s: float = 10.0
    # Also write last.pt after this many optimizer steps since its last write, inside an epoch
    # or at its end (0: by time only).
    checkpoint_every_steps: int = 0

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ConfigError for a value no run could use."""
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            # inf and nan pass every range check below and would train on NaN.
            if isinstance(value, float) and not math.isfinite(value):
                raise ConfigError(f"{field.name} must be a finite number, got {value}")
            if isinstance(value, str) and "\0" in value:
                raise ConfigError(f"{field.name} must not contain a NUL character")
        # Upper bounds catch typos (an extra zero or three) before they allocate the machine away.
        checks = [
            (1 <= self.epochs <= 10**6, "epochs must be between 1 and 1000000"),
            (1 <= self.batch_size <= 10**8, "batch_size must be between 1 and 100000000"),
            (
                0 <= self.val_batch_size <= 10**8,
                "val_batch_size must be between 0 (4 x batch_size) and 100000000",
            ),
            (self.lr > 0.0, "lr must be greater than 0"),
            (self.weight_decay >= 0.0, "weight_decay must be 0 or more"),
            (self.min_lr >= 0.0, "min_lr must be 0 or more"),
            (0 <= self.plateau_patience <= 10**6, "plateau_patience must be between 0 and 1000000"),
            (0.0 < self.plateau_factor < 1.0, "plateau_factor must be between 0 and 1"),
            (1 <= self.patience <= 10**6, "patience must be between 1 and 1000000"),
            (0.0 < self.ema_decay < 1.0, "ema_decay must be between 0 and 1 (exclusive)"),
            (
                self.patience > self.plateau_patience,
                "patience must be larger than plateau_patience, "
                "or training stops before the learning rate is ever lowered",
            ),
            (0 <= self.seed <= SEED_MAX, f"seed must be between 0 and {SEED_MAX} (numpy's range)"),
            (self.device in ("auto", "cpu", "cuda"), "device must be auto, cpu or cuda"),
            (str(self.out).strip() != "", "out must name a folder for the run, e.g. runs/latest"),
            (self.tracking in ("none", "mlflow"), "tracking must be none or mlflow"),
            (
                0.0 <= self.checkpoint_every_s <= 10**6,
                "checkpoint_every_s must be between 0 and 1000000",
            ),
            (
                0 <= self.checkpoint_every_steps <= 10**9,
                "checkpoint_every_steps must be between 0 and 1000000000",
            ),
        ]
        checks += self.data_checks() + self.model_checks() + self.task_checks()
        for ok, message in checks:
            if not ok:
                raise ConfigError(message)


def field_types() -> dict[str, typing.Any]:
    """The declared type of each Config field."""
    return typing.get_type_hints(Config)


def convert(key: str, value: typing.Any) -> typing.Any:
    """Check (or, for command-line strings, parse) one value against the type of its field."""
    hints = field_types()
    if key not in hints:
        raise ConfigError(f"unknown setting '{key}'; known: {', '.join(hints)}")
    expected = hints[key]
    optional = typing.get_origin(expected) in (typing.Union, types.UnionType)
    base = str if optional else expected
    if isinstance(value, str) and base is not str:
        value = _parse(key, value, base)
    if optional and isinstance(value, str) and value.strip() == "":
        # What an unset shell variable gives (--data "$DATA"): never read as "unset", which
        # would train on the built-in data without a word.
        raise ConfigError(
            f"{key} is empty (an unset shell variable?); give a value, or leave {key} out "
            "for its default"
        )
    if optional and value is None:
        return None
    if base is float and isinstance(value, int) and not isinstance(value, bool):
        try:
            value = float(value)
        except OverflowError:  # an integer with hundreds of digits
            digits = len(str(abs(value)))
            raise ConfigError(f"{key} must be a finite number, got {digits} digits") from None
    if type(value) is not base:
        raise ConfigError(f"{key} must be {base.__name__}, got {value!r}")
    return value


def _parse(key: str, text: str, base: type) -> typing.Any:
    if base is bool:
        if text.lower() in ("true", "1", "yes", "on"):
            return True
        if text.lower() in ("false", "0", "no", "off"):
            return False
        raise ConfigError(f"{key} must be true or false, got {text!r}")
    try:
        return base(text)
    except ValueError:
        raise ConfigError(f"{key} must be {base.__name__}, got {text!r}") from None


def load_config(
    path: str | Path | None = None,
    overrides: typing.Iterable[str] = (),
    base: dict[str, typing.Any] | None = None,
) -> Config:
    """Defaults (or `base`, e.g. a checkpoint's config), then the TOML file, then KEY=VALUE."""
    values: dict[str, typing.Any] = dict(base or {})
    if path is not None:
        values.update(read_toml(path))
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"override '{item}' is not KEY=VALUE")
        values[key.strip()] = value.strip()
    return Config(**{key: convert(key, value) for key, value in values.items()})


def read_toml(path: str | Path) -> dict[str, typing.Any]:
    """The settings in a TOML file, which must be a small, regular, UTF-8 file."""
    try:
        mode = os.stat(path).st_mode
        if stat.S_ISDIR(mode):
            raise ConfigError(f"config file {path} is a folder; give a TOML file")
        if not stat.S_ISREG(mode):  # /dev/zero or a pipe would be read forever
            raise ConfigError(f"config file {path} is not a regular file; give a TOML file")
        with open(path, "rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as err:
        raise ConfigError(f"cannot read config file {path}: {err.strerror}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"config file {path} is over {MAX_CONFIG_BYTES} bytes; is it TOML?")
    data = data.removeprefix(codecs.BOM_UTF8)  # as some Windows editors save UTF-8
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise ConfigError(
            f"{path}:{line}: byte 0x{data[err.start]:02x} is not UTF-8; save the file as UTF-8"
        ) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path} is not valid TOML: {err}") from None


def dump_config(cfg: Config) -> str:
    """The config as TOML, ready to save and pass back with --config."""
    lines = []
    for key, value in dataclasses.asdict(cfg).items():
        if value is None:
            lines.append(f"# {key} = (unset)")
        elif isinstance(value, bool):
            lines.append(f"{key} = {str(value).lower()}")
        elif isinstance(value, str):
            lines.append(f"{key} = {json.dumps(value)}")
        else:
            lines.append(f"{key} = {value!r}")
    return "\n".join(lines) + "\n"
