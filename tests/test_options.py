"""Project names, option checks, and copier.yml kept in step with scaffold's options."""

import dataclasses

import pytest
import yaml

import scaffold
from scaffold.errors import UsageError
from scaffold.options import SCHEDULERS, TASKS, Options, project_names
from tests.conftest import REPO


@pytest.mark.parametrize(
    "dest, expected",
    [
        ("my-proj", ("my-proj", "my_proj")),
        ("some/where/My.Proj2", ("My.Proj2", "my_proj2")),
        ("/tmp/x/demo_1/", ("demo_1", "demo_1")),
    ],
)
def test_names_from_dest(dest, expected):
    assert project_names(dest) == expected


@pytest.mark.parametrize(
    "dest, message",
    [
        ("", "DEST is empty"),
        ("   ", "DEST is empty"),
        ("../escape", "must not contain '..'"),
        ("a/../../b", "must not contain '..'"),
        ("2fast", "not a valid project name"),
        ("-dash", "not a valid project name"),
        ("ends-", "not a valid project name"),
        ("{{evil}}", "not a valid project name"),
        ("{%if%}x", "not a valid project name"),
        ("a;rm -rf ~", "not a valid project name"),
        ("$(whoami)", "not a valid project name"),
        ("na`me", "not a valid project name"),
        ("name with space", "not a valid project name"),
        ("class", "Python keyword"),
        ("import", "Python keyword"),
        ("torch", "shadow"),
        ("json", "shadow"),
    ],
)
def test_bad_names_are_refused(dest, message):
    with pytest.raises(UsageError, match=message):
        project_names(dest)


def test_patience_must_exceed_plateau_patience():
    with pytest.raises(UsageError, match=r"--patience \(2\) must be larger"):
        Options(scheduler="plateau", early_stopping=True, patience=2, plateau_patience=2).validate()
    Options(scheduler="plateau", early_stopping=True, patience=3, plateau_patience=2).validate()
    # With the cosine schedule there is no plateau patience to exceed.
    Options(scheduler="cosine", early_stopping=True, patience=1).validate()


def test_answers_carry_follow_up_values_only_when_switched_on():
    basic = {"task", "scheduler", "amp", "clip", "early_stopping", "seed"}
    assert set(Options().answers()) == basic
    full = Options(scheduler="plateau", clip=True, early_stopping=True).answers()
    assert {"plateau_patience", "max_grad_norm", "patience"} <= set(full)


def test_copier_questions_match_scaffold_options():
    questions = yaml.safe_load((REPO / "copier.yml").read_text())
    assert questions["template_version"]["default"] == scaffold.__version__
    assert tuple(questions["task"]["choices"].values()) == TASKS
    assert tuple(questions["scheduler"]["choices"].values()) == SCHEDULERS
    for field in dataclasses.fields(Options):
        assert questions[field.name]["default"] == field.default, field.name
