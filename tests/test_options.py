"""Options are defined once, in copier.yml: scaffold's flags, prompts and checks follow it."""

import dataclasses
import inspect
import keyword
import math
import sys

import pytest
import yaml
from typer.testing import CliRunner

import scaffold
from scaffold import cli, new_project
from scaffold.errors import UsageError
from scaffold.option_flags import CHOICES, flag_help
from scaffold.options import (
    DEFAULTS,
    OPTIONS,
    QUESTIONS,
    Options,
    complete,
    project_names,
    unused_flags,
)
from tests.conftest import REPO

SPEC = yaml.safe_load((REPO / "copier.yml").read_text())


@pytest.mark.parametrize(
    "dest, expected",
    [
        ("my-proj", ("my-proj", "my_proj")),
        ("some/where/My.Proj2", ("My.Proj2", "my_proj2")),
        ("/tmp/x/demo_1/", ("demo_1", "demo_1")),
        ("a--b..c", ("a--b..c", "a__b__c")),  # as copier.yml's package_name default writes it
        ("n" * 60, ("n" * 60, "n" * 60)),
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
        ("2fast", "not a valid project name: use letters"),
        ("-dash", "not a valid project name"),
        ("ends-", "not a valid project name"),
        ("ends.", "not a valid project name"),
        ("{{evil}}", "not a valid project name"),
        ("{%if%}x", "not a valid project name"),
        ("a;rm -rf ~", "not a valid project name"),
        ("$(whoami)", "not a valid project name"),
        ("na`me", "not a valid project name"),
        ("name with space", "not a valid project name"),
        ("n" * 61, "use at most 60 characters (it has 61)"),
        ("n" * 300, "use at most 60 characters (it has 300)"),
        ("class", "'class' would shadow a Python keyword"),
        ("import", "'import' would shadow"),
        ("torch", "'torch' would shadow"),
        ("tqdm", "'tqdm' would shadow"),
        ("matplotlib", "'matplotlib' would shadow"),
        ("json", "'json' would shadow"),
        ("src", "'src' would shadow"),
        ("pytest", "'pytest' would shadow"),
        ("Tests", "'tests' would shadow"),
        ("e-mail", None),  # gives 'e_mail': fine
    ],
)
def test_bad_names_are_refused(dest, message):
    if message is None:
        project_names(dest)
        return
    with pytest.raises(UsageError) as caught:
        project_names(dest)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_long_names_are_shortened_in_the_message():
    with pytest.raises(UsageError) as caught:
        project_names("a" * 280)
    assert len(str(caught.value)) < 200


@pytest.mark.parametrize(
    "options, message",
    [
        (Options(clip=True, max_grad_norm=math.nan), "--max-grad-norm nan: must be a finite"),
        (Options(clip=True, max_grad_norm=math.inf), "--max-grad-norm inf: must be a finite"),
        (Options(clip=True, max_grad_norm=0.0), "--max-grad-norm 0.0: must be a finite"),
        (Options(clip=True, max_grad_norm=-1.0), "--max-grad-norm -1.0: must be a finite"),
        (Options(seed=-1), "--seed -1: must be between 0 and 4294967295"),
        (Options(seed=2**32), "--seed 4294967296: must be between 0 and 4294967295"),
        (Options(grad_accum=0), "--grad-accum 0: must be between 1 and 1000000"),
        (Options(warmup_steps=-5), "--warmup-steps -5: must be between 0 and 1000000000"),
        (Options(early_stopping=True, patience=0), "--patience 0: must be between 1 and 1000000"),
        (
            Options(scheduler="plateau", plateau_patience=-1),
            "--plateau-patience -1: must be between 0 and 1000000",
        ),
        (
            Options(scheduler="plateau", early_stopping=True, patience=2, plateau_patience=2),
            "--patience 2: must be larger than the plateau patience (2)",
        ),
        (Options(ema=True, ema_decay=1.0), "--ema-decay 1.0: must be a number between 0 and 1"),
        (Options(ema=True, ema_decay=0.0), "--ema-decay 0.0: must be a number between 0 and 1"),
        (Options(ema=True, ema_decay=math.nan), "--ema-decay nan: must be a number between"),
        (Options(ema=True, ema_decay=-0.5), "--ema-decay -0.5: must be a number between 0 and 1"),
        (Options(task="segmentation"), "--task segmentation: must be one of classification"),
        (Options(seed="7"), "--seed 7: must be of type int"),
    ],
)
def test_out_of_range_options_are_refused_naming_the_flag(options, message):
    with pytest.raises(UsageError) as caught:
        options.validate()
    assert str(caught.value).startswith(message)


def test_as_a_setting_the_option_is_named_as_scaffold_update_set_writes_it():
    with pytest.raises(UsageError, match=r"^seed=-1: must be between 0 and 4294967295"):
        Options(seed=-1).validate(as_setting=True)


@pytest.mark.parametrize(
    "options",
    [
        Options(seed=0),
        Options(seed=2**32 - 1),
        Options(grad_accum=1),
        Options(grad_accum=10**6),
        Options(clip=True, max_grad_norm=1e-6),
        Options(early_stopping=True, patience=1),
        Options(scheduler="plateau", plateau_patience=0),
        Options(scheduler="plateau", early_stopping=True, patience=3, plateau_patience=2),
        # A follow-up value whose switch is off is not used, so not checked (as in copier).
        Options(clip=False, max_grad_norm=math.nan),
        Options(ema=False, ema_decay=2.0),
        Options(ema=True, ema_decay=0.5),
        Options(ema=True, ema_decay=0.99999),
        Options(scheduler="cosine", early_stopping=True, patience=1, plateau_patience=9),
    ],
)
def test_boundary_values_are_accepted(options):
    options.validate()


def test_answers_carry_follow_up_values_only_when_switched_on():
    basic = {"task", "scheduler", "amp", "clip", "grad_accum", "warmup_steps", "early_stopping"}
    basic |= {"distributed", "ema", "compile", "seed"}
    assert set(Options().answers()) == basic
    full = Options(scheduler="plateau", clip=True, early_stopping=True, ema=True).answers()
    assert set(full) == basic | {"plateau_patience", "max_grad_norm", "patience", "ema_decay"}


def test_patience_default_stays_above_the_plateau_patience():
    # copier.yml's default for patience depends on the answers before it.
    assert complete({}).patience == 5
    assert complete({"scheduler": "plateau", "plateau_patience": 4}).patience == 5
    assert complete({"scheduler": "plateau", "plateau_patience": 7}).patience == 8
    assert complete({"scheduler": "cosine", "plateau_patience": 7}).patience == 5


def test_follow_up_flags_without_their_switch_are_named():
    given = {"scheduler": "cosine", "plateau_patience": 3, "patience": 4, "max_grad_norm": 2.0}
    given["ema_decay"] = 0.99
    assert unused_flags(given, complete(given)) == [
        "--plateau-patience applies only with --scheduler plateau; "
        "add --scheduler plateau or drop --plateau-patience",
        "--max-grad-norm applies only with --clip; add --clip or drop --max-grad-norm",
        "--patience applies only with --early-stopping; add --early-stopping or drop --patience",
        "--ema-decay applies only with --ema; add --ema or drop --ema-decay",
    ]
    assert unused_flags({"clip": True, "max_grad_norm": 2.0}, complete({"clip": True})) == []


# --- drift: everything scaffold knows about an option comes from copier.yml ------------------


def test_options_are_copier_questions_with_their_types_and_defaults():
    asked = [k for k, v in SPEC.items() if not k.startswith("_") and v.get("when") is not False]
    assert list(QUESTIONS) == asked
    assert list(OPTIONS) == [k for k in asked if k not in ("project_name", "package_name")]
    types = {"str": str, "int": int, "float": float, "bool": bool}
    for field in dataclasses.fields(Options):
        question = SPEC[field.name]
        assert field.type is types[question["type"]], field.name
        assert OPTIONS[field.name].help == question["help"], field.name
        if "{" not in str(question["default"]):
            assert field.default == question["default"] == DEFAULTS[field.name], field.name
    assert OPTIONS["task"].choices == tuple(SPEC["task"]["choices"].values())
    assert OPTIONS["plateau_patience"].parent == ("scheduler", "plateau")
    assert OPTIONS["max_grad_norm"].parent == ("clip", True)
    assert OPTIONS["patience"].parent == ("early_stopping", True)
    assert OPTIONS["ema_decay"].parent == ("ema", True)
    assert SPEC["template_version"]["default"] == scaffold.__version__


def test_every_option_is_a_flag_of_scaffold_new_with_copier_choices_and_help():
    params = inspect.signature(cli.new).parameters
    assert [name for name in params if name in OPTIONS] == list(OPTIONS)
    assert [t.value for t in CHOICES["task"]] == list(OPTIONS["task"].choices)
    assert [s.value for s in CHOICES["scheduler"]] == list(OPTIONS["scheduler"].choices)
    for name, question in OPTIONS.items():
        help_text = flag_help(name)
        assert help_text.startswith(question.help), name
        default = (
            DEFAULTS[name] if question.type is not bool else ("on" if DEFAULTS[name] else "off")
        )
        assert help_text.endswith(f"[default: {default}]"), name


def test_every_question_of_copier_yml_is_a_flag_of_the_new_command(monkeypatch):
    # The expectation comes from copier.yml itself: each question it asks (not `when: false`),
    # but the two names DEST gives, must be a flag of `scaffold new`, in --help with its help,
    # and taken with its type: a value given by the flag reaches the worker as that option.
    asked = {
        name: spec
        for name, spec in SPEC.items()
        if not name.startswith("_")
        and spec.get("when") is not False
        and name not in ("project_name", "package_name")
    }
    assert len(asked) >= 14  # the copier.yml read is the one that defines the options
    help_text = CliRunner().invoke(cli.app, ["new", "--help"]).output
    unwrapped = "".join(help_text.split())  # lines wrap at spaces and after hyphens
    help_text = " ".join(help_text.split())
    seen = {}
    monkeypatch.setattr(new_project, "new_project", lambda dest, given, **kw: seen.update(given))
    for name, spec in asked.items():
        flag = "--" + name.replace("_", "-")
        kind = spec.get("type", "str")
        if kind == "bool":
            shown, args, value = f"{flag} / --no-{flag[2:]}", [flag], True
            if spec.get("default") is True:
                args, value = ["--no-" + flag[2:]], False
        elif "choices" in spec:
            choices = list(spec["choices"].values())
            shown, args, value = f"{flag} <{'|'.join(choices)}>", [flag, choices[-1]], choices[-1]
        else:
            value = {"int": 7, "float": 0.5, "str": "x"}[kind]
            shown, args = f"{flag} <{kind}>", [flag, str(value)]
        assert shown in help_text, f"copier.yml's {name}: no {shown} in scaffold new --help"
        assert "".join(spec["help"].split()) in unwrapped, name
        seen.clear()
        result = CliRunner().invoke(cli.app, ["new", "p", *args])
        assert result.exit_code == 0, (name, result.output)
        assert seen[name] == value and type(seen[name]) is type(value), (name, seen)
        assert all(seen[other] is None for other in seen if other != name), (name, seen)


def test_update_set_help_names_every_option():
    text = "".join(CliRunner().invoke(cli.app, ["update", "--help"]).output.split())
    assert "KEYisoneof:" + ",".join(OPTIONS) + "." in text


def test_reserved_package_names_cover_keywords_and_the_standard_library():
    reserved = set(SPEC["reserved_package_names"]["default"].split())
    public = {name.lower() for name in sys.stdlib_module_names if not name.startswith("_")}
    assert public <= reserved, sorted(public - reserved)
    assert {k for k in keyword.kwlist if k.islower()} <= reserved
    # What a generated project imports or is tested with, and its own folders.
    assert {"torch", "numpy", "tomli", "pytest", "src", "test", "tests"} <= reserved
