"""Settings: defaults, TOML file, overrides; unknown keys, wrong types and bad values are errors."""

import dataclasses
import os

import pytest

import task_cases
from regression_warmup_accum import train
from regression_warmup_accum.config import (
    Config,
    ConfigError,
    dump_config,
    load_config,
)


@pytest.mark.probe
def test_a_toml_file_may_start_with_a_utf8_bom(tmp_path):
    path = tmp_path / "run.toml"
    path.write_bytes(b"\xef\xbb\xbfepochs = 7\n")
    assert load_config(path).epochs == 7
    path.write_bytes(b"\xef\xbb\xbfepochs = 7\n# caf\xe9\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == f"{path}:2: byte 0xe9 is not UTF-8; save the file as UTF-8"


def test_file_then_overrides_then_flags(tmp_path, capsys):
    path = tmp_path / "run.toml"
    path.write_text("lr = 0.01\nepochs = 7\nbatch_size = 32\n")
    cfg = load_config(path, ["epochs=9"])
    assert (cfg.lr, cfg.epochs, cfg.batch_size) == (0.01, 9, 32)
    argv = ["--config", str(path), "--set", "epochs=9", "--epochs", "11", "--print-config"]
    assert train.main(argv) == 0
    assert "epochs = 11\n" in capsys.readouterr().out


def test_printed_config_loads_back_unchanged(tmp_path):
    path = tmp_path / "cfg.toml"
    configs = [
        Config(lr=3e-4, deterministic=False),
        Config(),
        Config(seed=2**32 - 1, lr=1e6, weight_decay=0.0, out='a "quoted" \\ folder'),
        Config(seed=0, lr=1e-300, out="ünïcode"),
    ]
    for cfg in configs + [Config(**settings) for settings in task_cases.ROUND_TRIP]:
        path.write_text(dump_config(cfg), encoding="utf-8")
        assert load_config(path) == cfg


KNOWN = ", ".join(field.name for field in dataclasses.fields(Config))
SEED = "seed must be between 0 and 4294967295 (numpy's range)"
OUT = "out must name a folder for the run, e.g. runs/latest"

# Each bad value, as --set and in a TOML file, gives this line.
BAD_VALUES = [
    ("lr=inf", "lr = inf", "lr must be a finite number, got inf"),
    ("lr=-inf", "lr = -inf", "lr must be a finite number, got -inf"),
    ("lr=nan", "lr = nan", "lr must be a finite number, got nan"),
    ("lr=1e400", "lr = 1e400", "lr must be a finite number, got inf"),
    ("lr=0", "lr = 0", "lr must be greater than 0"),
    ("weight_decay=nan", "weight_decay = nan", "weight_decay must be a finite number, got nan"),
    ("min_lr=inf", "min_lr = inf", "min_lr must be a finite number, got inf"),
    ("seed=-1", "seed = -1", SEED),
    ("seed=4294967296", "seed = 4294967296", SEED),
    ("out=", 'out = ""', OUT),
    ("out= ", 'out = "  "', OUT),
    ("epochs=0", "epochs = 0", "epochs must be between 1 and 1000000"),
    ("epochs=1000001", "epochs = 1000001", "epochs must be between 1 and 1000000"),
    ("batch_size=0", "batch_size = 0", "batch_size must be between 1 and 100000000"),
    ("grad_accum=0", "grad_accum = 0", "grad_accum must be between 1 and 1000000"),
    ("grad_accum=1000001", "grad_accum = 1000001", "grad_accum must be between 1 and 1000000"),
    (
        "val_batch_size=-1",
        "val_batch_size = -1",
        "val_batch_size must be between 0 (4 x batch_size) and 100000000",
    ),
    ("device=tpu", 'device = "tpu"', "device must be auto, cpu or cuda"),
    ("tracking=wandb", 'tracking = "wandb"', "tracking must be none or mlflow"),
    (
        "checkpoint_every_s=-1",
        "checkpoint_every_s = -1.0",
        "checkpoint_every_s must be between 0 and 1000000",
    ),
    ("max_grad_norm=inf", "max_grad_norm = inf", "max_grad_norm must be a finite number, got inf"),
    ("max_grad_norm=nan", "max_grad_norm = nan", "max_grad_norm must be a finite number, got nan"),
    ("max_grad_norm=0", "max_grad_norm = 0", "max_grad_norm must be greater than 0"),
]


@pytest.mark.probe
@pytest.mark.parametrize("override, toml, message", BAD_VALUES + task_cases.BAD_VALUES)
def test_bad_values_are_the_same_error_from_set_and_from_a_file(tmp_path, override, toml, message):
    with pytest.raises(ConfigError) as err:
        load_config(None, [override])
    assert str(err.value) == message
    path = tmp_path / "bad.toml"
    path.write_text(toml + "\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == message


@pytest.mark.probe
@pytest.mark.parametrize(
    "argv, message",
    [
        (["--set", "lr=inf"], "lr must be a finite number, got inf"),
        (["--seed", "-1"], SEED),
        (["--seed", str(2**32)], SEED),
        (["--out", ""], OUT),
        (["--epochs", "0"], "epochs must be between 1 and 1000000"),
    ]
    + task_cases.BAD_FLAGS,
)
def test_bad_flags_are_one_line_and_nothing_runs(tmp_path, capsys, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)  # an empty out would have written here
    assert train.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err == f"error: {message}\n"
    assert list(tmp_path.iterdir()) == []


EMPTY_DATA = (
    "data is empty (an unset shell variable?); give a value, or leave data out for its default"
)


@pytest.mark.probe
@pytest.mark.parametrize(
    "argv, toml",
    [
        (["--data", ""], None),  # --data "$DATA" with DATA unset
        (["--data", "   "], None),
        (["--set", "data="], None),
        (["--set", "data = "], None),
        ([], 'data = ""\n'),
        ([], 'data = " "\n'),
    ],
    ids=["flag", "flag-blank", "set", "set-spaces", "toml", "toml-blank"],
)
def test_empty_data_is_refused_not_read_as_the_synthetic_data(
    tmp_path, capsys, monkeypatch, argv, toml
):
    monkeypatch.chdir(tmp_path)  # a run would write runs/latest here
    if toml is not None:
        (tmp_path / "run.toml").write_text(toml)
        argv = ["--config", "run.toml"]
    assert train.main(["--epochs", "1", *argv]) == 2
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", f"error: {EMPTY_DATA}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == (["run.toml"] if toml else [])


@pytest.mark.probe
def test_boundary_values_are_accepted():
    assert Config(seed=0).seed == 0
    assert Config(seed=2**32 - 1).seed == 2**32 - 1
    assert Config(lr=1e6).lr == 1e6  # finite; a diverging loss is stopped by the training loop
    assert load_config(None, ["epochs=1000000", *task_cases.BOUNDARY]).epochs == 10**6


@pytest.mark.probe
@pytest.mark.parametrize(
    "text, message",
    [
        ("learning_rate = 0.1", "unknown setting 'learning_rate'; known: " + KNOWN),
        ('lr = "fast"', "lr must be float, got 'fast'"),
        ("epochs = 2.5", "epochs must be int, got 2.5"),
        ("deterministic = 1", "deterministic must be bool, got 1"),
        ("lr = 1" + "0" * 400, "lr must be a finite number, got 401 digits"),
        ('out = "a\\u0000b"', "out must not contain a NUL character"),
    ],
)
def test_bad_file_values_are_errors(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == message


@pytest.mark.probe
def test_a_file_that_is_no_toml_settings_file_is_a_one_line_error(tmp_path):
    latin1 = tmp_path / "latin1.toml"
    latin1.write_bytes(b"# settings\n# caf\xe9\nepochs = 3\n")
    huge = tmp_path / "huge.toml"
    huge.write_bytes(b"#" * (1 << 20) + b"\n")
    broken = tmp_path / "broken.toml"
    broken.write_text("epochs = \n")
    cases = {
        latin1: f"{latin1}:2: byte 0xe9 is not UTF-8; save the file as UTF-8",
        huge: f"config file {huge} is over 1048576 bytes; is it TOML?",
        tmp_path: f"config file {tmp_path} is a folder; give a TOML file",
        tmp_path / "no.toml": f"cannot read config file {tmp_path / 'no.toml'}: "
        "No such file or directory",
        broken: f"{broken} is not valid TOML: Invalid value (at line 1, column 10)",
    }
    if hasattr(os, "mkfifo"):
        fifo = tmp_path / "pipe.toml"
        os.mkfifo(fifo)
        cases[fifo] = f"config file {fifo} is not a regular file; give a TOML file"
        cases["/dev/zero"] = "config file /dev/zero is not a regular file; give a TOML file"
    for path, message in cases.items():
        with pytest.raises(ConfigError) as err:
            load_config(path)
        assert str(err.value) == message


@pytest.mark.probe
def test_a_bad_config_file_is_one_line_from_the_command_line(tmp_path, capsys):
    path = tmp_path / "run.toml"
    path.write_bytes(b"lr = 0.01\n\xff\xfe\n")
    assert train.main(["--config", str(path), "--print-config"]) == 2
    message = f"{path}:2: byte 0xff is not UTF-8; save the file as UTF-8"
    assert capsys.readouterr().err == f"error: {message}\n"


@pytest.mark.probe
def test_bad_override_is_a_one_line_error(capsys):
    assert train.main(["--set", "epochs=many", "--print-config"]) == 2
    err = capsys.readouterr().err
    assert err == "error: epochs must be int, got 'many'\n"
