"""The options of a generated project: names, choices, defaults and checks shared by CLI and tests.

copier.yml asks the same questions for plain `copier copy`; a test keeps the two in step.
"""

import keyword
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path, PurePath

from scaffold.errors import UsageError

TASKS = ("classification", "regression")
SCHEDULERS = ("cosine", "plateau")

# One line each: the prompt's explanation and the option's --help text.
HELP = {
    "task": "What the model predicts: class labels (classification) or a number (regression).",
    "scheduler": "Learning-rate schedule: cosine (stepped once per epoch) or plateau "
    "(ReduceLROnPlateau, stepped after validation with the validation loss).",
    "plateau_patience": "Plateau scheduler: epochs without improvement before the LR drops.",
    "amp": "Mixed precision: bf16 autocast on the CPU; on CUDA bf16, or fp16 with a GradScaler.",
    "clip": "Clip the gradient norm after backward and before each optimizer step.",
    "max_grad_norm": "Largest gradient norm allowed when clipping.",
    "early_stopping": "Stop when the validation loss stops improving and keep the best weights.",
    "patience": "Early stopping: epochs without improvement before training stops.",
    "seed": "Default random seed of the generated project.",
}

# Names a package must not take: it would shadow a module the project (or Python) imports.
_RESERVED = {"torch", "numpy", "tomli", "test", "tests", "src", "setuptools", "pytest"}
_PROJECT_NAME = re.compile(r"[A-Za-z]([A-Za-z0-9._-]*[A-Za-z0-9])?")


@dataclass(frozen=True)
class Options:
    """The answers that shape a generated project; the defaults are scaffold's defaults."""

    task: str = "classification"
    scheduler: str = "cosine"
    plateau_patience: int = 2
    amp: bool = False
    clip: bool = False
    max_grad_norm: float = 1.0
    early_stopping: bool = False
    patience: int = 5
    seed: int = 42

    def validate(self) -> None:
        """Raise UsageError for a combination no generated project should have."""
        if self.task not in TASKS:
            raise UsageError(f"task must be one of {', '.join(TASKS)}, not '{self.task}'")
        if self.scheduler not in SCHEDULERS:
            raise UsageError(f"scheduler must be one of {', '.join(SCHEDULERS)}")
        if self.plateau_patience < 0:
            raise UsageError("--plateau-patience must be 0 or more")
        if self.max_grad_norm <= 0:
            raise UsageError("--max-grad-norm must be greater than 0")
        if self.patience < 1:
            raise UsageError("--patience must be at least 1")
        if self.early_stopping and self.scheduler == "plateau":
            if self.patience <= self.plateau_patience:
                raise UsageError(
                    f"--patience ({self.patience}) must be larger than --plateau-patience "
                    f"({self.plateau_patience}), or training stops before the LR is ever lowered"
                )

    def answers(self) -> dict:
        """The copier answers: follow-up values only where their switch is on."""
        answers = asdict(self)
        if self.scheduler != "plateau":
            del answers["plateau_patience"]
        if not self.clip:
            del answers["max_grad_norm"]
        if not self.early_stopping:
            del answers["patience"]
        return answers

    def describe(self) -> str:
        """A short phrase such as 'regression, cosine scheduler, AMP, clipping (max norm 1.0)'."""
        parts = [self.task, f"{self.scheduler} scheduler"]
        if self.amp:
            parts.append("AMP")
        if self.clip:
            parts.append(f"clipping (max norm {self.max_grad_norm})")
        if self.early_stopping:
            parts.append(f"early stopping (patience {self.patience})")
        return ", ".join(parts)


def project_names(dest: str) -> tuple[str, str]:
    """The distribution name and the package name that DEST's last part gives, or UsageError."""
    if not dest.strip():
        raise UsageError("DEST is empty: give the folder to create, e.g. 'scaffold new my-project'")
    if ".." in PurePath(dest).parts:
        raise UsageError(f"DEST must not contain '..': {dest!r}")
    name = Path(dest).name or Path(dest).absolute().name
    if not _PROJECT_NAME.fullmatch(name):
        raise UsageError(
            f"{name!r} is not a valid project name: use letters, digits, '-', '_' and '.', "
            "starting with a letter and ending with a letter or digit"
        )
    package = re.sub(r"[-.]+", "_", name).lower()
    if keyword.iskeyword(package) or package in sys.stdlib_module_names or package in _RESERVED:
        raise UsageError(
            f"project name {name!r} gives package '{package}', which would shadow "
            "a Python keyword or a module the project imports; choose another name"
        )
    return name, package
