"""Settings: defaults, TOML file, overrides; unknown keys and wrong types are errors."""

import pytest

from regression_cosine_clip import train
from regression_cosine_clip.config import Config, ConfigError, dump_config, load_config


def test_file_then_overrides_then_flags(tmp_path, capsys):
    path = tmp_path / "run.toml"
    path.write_text("lr = 0.01\nepochs = 7\nbatch_size = 32\n")
    cfg = load_config(path, ["epochs=9"])
    assert (cfg.lr, cfg.epochs, cfg.batch_size) == (0.01, 9, 32)
    argv = ["--config", str(path), "--set", "epochs=9", "--epochs", "11", "--print-config"]
    assert train.main(argv) == 0
    assert "epochs = 11\n" in capsys.readouterr().out


def test_printed_config_loads_back_unchanged(tmp_path):
    cfg = Config(lr=3e-4, data="some file.csv", deterministic=False)
    path = tmp_path / "cfg.toml"
    path.write_text(dump_config(cfg))
    assert load_config(path) == cfg
    path.write_text(dump_config(Config()))
    assert load_config(path) == Config()


@pytest.mark.parametrize(
    "text, message",
    [
        ("learning_rate = 0.1", "unknown setting 'learning_rate'"),
        ('lr = "fast"', "lr must be float"),
        ("epochs = 2.5", "epochs must be int"),
        ("deterministic = 1", "deterministic must be bool"),
        ("epochs = 0", "epochs must be at least 1"),
    ],
)
def test_bad_file_values_are_errors(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError, match=message):
        load_config(path)


def test_bad_override_is_a_one_line_error(capsys):
    assert train.main(["--set", "epochs=many", "--print-config"]) == 2
    err = capsys.readouterr().err
    assert err == "error: epochs must be int, got 'many'\n"
