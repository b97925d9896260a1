"""One list of good and bad answers, run through `scaffold new` and plain `copier copy`: the
two must agree on each, since both read the same copier.yml."""

import math
import warnings

import copier
import pytest
from typer.testing import CliRunner

from scaffold import cli
from tests.conftest import REPO

# (answers, refused because of); None where both must accept the answers.
NAME_CASES = [
    ("my-proj", None),
    ("My.Proj2", None),
    ("x1", None),
    ("a" * 60, None),
    ("json", "would shadow"),
    ("src", "would shadow"),
    ("pytest", "would shadow"),
    ("tests", "would shadow"),
    ("os", "would shadow"),
    ("class", "would shadow"),
    ("import", "would shadow"),
    ("torch", "would shadow"),
    ("a.", "use letters, digits"),
    ("ends-", "use letters, digits"),
    ("2fast", "use letters, digits"),
    ("a" * 61, "use at most 60 characters"),
    ("a" * 240, "use at most 60 characters"),
    ("a" * 300, "use at most 60 characters"),
]
NUMBER_CASES = [
    ({"seed": 0}, None),
    ({"seed": 2**32 - 1}, None),
    ({"seed": 7}, None),
    ({"seed": -1}, "must be between 0 and 4294967295"),
    ({"seed": 2**32}, "must be between 0 and 4294967295"),
    ({"grad_accum": 1}, None),
    ({"grad_accum": 3}, None),
    ({"grad_accum": 10**6}, None),
    ({"grad_accum": 0}, "must be between 1 and 1000000"),
    ({"grad_accum": -2}, "must be between 1 and 1000000"),
    ({"grad_accum": 10**6 + 1}, "must be between 1 and 1000000"),
    ({"warmup_steps": 0}, None),
    ({"warmup_steps": 500}, None),
    ({"warmup_steps": 10**9}, None),
    ({"warmup_steps": -1}, "must be between 0 and 1000000000"),
    ({"warmup_steps": 10**9 + 1}, "must be between 0 and 1000000000"),
    ({"clip": True, "max_grad_norm": 0.5}, None),
    ({"clip": True, "max_grad_norm": 1e-8}, None),
    ({"clip": True, "max_grad_norm": math.nan}, "must be a finite number greater than 0"),
    ({"clip": True, "max_grad_norm": math.inf}, "must be a finite number greater than 0"),
    ({"clip": True, "max_grad_norm": -math.inf}, "must be a finite number greater than 0"),
    ({"clip": True, "max_grad_norm": 0.0}, "must be a finite number greater than 0"),
    ({"clip": True, "max_grad_norm": -1.0}, "must be a finite number greater than 0"),
    ({"early_stopping": True, "patience": 1}, None),
    ({"early_stopping": True, "patience": 0}, "must be between 1 and 1000000"),
    ({"early_stopping": True, "patience": -3}, "must be between 1 and 1000000"),
    ({"scheduler": "plateau", "plateau_patience": 0}, None),
    ({"scheduler": "plateau", "plateau_patience": -1}, "must be between 0 and 1000000"),
    ({"scheduler": "plateau", "plateau_patience": 1000001}, "must be between 0 and 1000000"),
    ({"early_stopping": True, "patience": 1000000}, None),
    ({"early_stopping": True, "patience": 1000001}, "must be between 1 and 1000000"),
    (
        {"scheduler": "plateau", "plateau_patience": 2, "early_stopping": True, "patience": 3},
        None,
    ),
    (
        {"scheduler": "plateau", "plateau_patience": 3, "early_stopping": True, "patience": 3},
        "must be larger than the plateau patience (3)",
    ),
    (
        {"scheduler": "plateau", "plateau_patience": 5, "early_stopping": True, "patience": 2},
        "must be larger than the plateau patience (5)",
    ),
    # Without --patience, the default rises above the plateau patience: valid in both.
    ({"scheduler": "plateau", "plateau_patience": 9, "early_stopping": True}, None),
    # A follow-up given while its switch is off would be silently unused: refused by both.
    ({"scheduler": "cosine", "plateau_patience": 3}, "applies only with"),
    ({"plateau_patience": 3}, "applies only with"),
    ({"clip": False, "max_grad_norm": 0.5}, "applies only with"),
    ({"max_grad_norm": 0.5}, "applies only with"),
    ({"early_stopping": False, "patience": 3}, "applies only with"),
    ({"patience": 3}, "applies only with"),
    ({"ema": True, "ema_decay": 0.5}, None),
    ({"ema": True, "ema_decay": 0.9999}, None),
    ({"ema": True, "ema_decay": 1.0}, "must be a number between 0 and 1"),
    ({"ema": True, "ema_decay": 0.0}, "must be a number between 0 and 1"),
    ({"ema": True, "ema_decay": math.nan}, "must be a number between 0 and 1"),
    ({"ema": True, "ema_decay": -0.5}, "must be a number between 0 and 1"),
    ({"ema": False, "ema_decay": 0.99}, "applies only with"),
    ({"ema_decay": 0.99}, "applies only with"),
]


def flags(answers: dict) -> list[str]:
    args = []
    for name, value in answers.items():
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            args.append(flag if value else "--no-" + flag[2:])
        else:
            args += [flag, str(value)]
    return args


def scaffold_verdict(dest, answers: dict) -> str | None:
    result = CliRunner().invoke(cli.app, ["new", str(dest), "-y", "--no-smoke", *flags(answers)])
    if result.exit_code == 0:
        assert dest.is_dir()
        return None
    assert result.exit_code == 2, result.output
    assert len(result.output.splitlines()) == 1 and result.output.startswith("error: ")
    assert not dest.exists()
    return result.output


def copier_verdict(dest, answers: dict) -> str | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the checkout may have uncommitted edits
            copier.run_copy(
                str(REPO), dest, data=answers, defaults=True, vcs_ref="HEAD", quiet=True
            )
    except ValueError as err:
        assert "Validation error for question" in str(err)
        return str(err)
    assert dest.is_dir()
    return None


def check_same(tmp_path, name: str, answers: dict, because: str | None):
    ours = scaffold_verdict(tmp_path / "ours" / name, answers)
    theirs = copier_verdict(tmp_path / "copier" / name, {"project_name": name, **answers})
    if because is None:
        assert ours is None and theirs is None, (ours, theirs)
    else:
        assert ours is not None and because in ours, ours
        assert theirs is not None and because in theirs, theirs


@pytest.mark.parametrize("name, because", NAME_CASES, ids=lambda v: str(v)[:24])
def test_names_get_the_same_verdict_from_scaffold_and_copier(tmp_path, name, because):
    check_same(tmp_path, name, {}, because)


@pytest.mark.parametrize(
    "answers, because",
    NUMBER_CASES,
    ids=["-".join(f"{k}={v}" for k, v in a.items()) for a, _ in NUMBER_CASES],
)
def test_numbers_get_the_same_verdict_from_scaffold_and_copier(tmp_path, answers, because):
    check_same(tmp_path, "proj", answers, because)
