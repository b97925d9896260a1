"""The `scaffold` command line, through Typer's CliRunner: what users type, what they see."""

import subprocess

import pytest
import yaml
from typer.testing import CliRunner

import scaffold
from scaffold import cli
from tests.conftest import PYTHON, REPO

runner = CliRunner()


def invoke(*args: str, input: str | None = None):
    return runner.invoke(cli.app, list(args), input=input)


def answers(project, *keys: str) -> tuple:
    recorded = yaml.safe_load((project / ".copier-answers.yml").read_text())
    return tuple(recorded[key] for key in keys)


def test_non_interactive_run_renders_the_given_options(tmp_path):
    dest = tmp_path / "demo-proj"
    result = invoke(
        "new", str(dest), "-y", "--task", "regression", "--scheduler", "plateau", "--amp",
        "--clip", "--max-grad-norm", "0.5", "--early-stopping", "--patience", "4", "--no-smoke",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert answers(dest, "task", "scheduler", "amp") == ("regression", "plateau", True)
    assert answers(dest, "clip", "max_grad_norm", "patience") == (True, 0.5, 4)
    assert answers(dest, "package_name") == ("demo_proj",)
    assert "Created demo-proj: regression, plateau scheduler, AMP" in result.output
    assert "python -m demo_proj.train" in result.output
    assert "Its tests guard the training loop" in result.output
    assert (dest / "src" / "demo_proj" / "engine.py").is_file()


def test_distributed_flag_is_recorded_and_reported(tmp_path):
    dest = tmp_path / "ddp-proj"
    result = invoke("new", str(dest), "-y", "--distributed", "--no-smoke")
    assert result.exit_code == 0, result.output
    assert answers(dest, "distributed") == (True,)
    assert "Created ddp-proj: classification, cosine scheduler, distributed (torchrun)" in (
        result.output
    )


def test_without_a_terminal_defaults_are_taken_and_nothing_waits(tmp_path):
    # CliRunner's stdin is not a terminal: no prompt may be shown, even without -y.
    result = invoke("new", str(tmp_path / "plain"), "--no-smoke", input="")
    assert result.exit_code == 0, result.output
    got = answers(tmp_path / "plain", "task", "scheduler", "amp", "clip", "early_stopping")
    assert got == ("classification", "cosine", False, False, False)
    assert "?" not in result.output and "[y/N]" not in result.output


def test_interactive_run_asks_each_question(tmp_path, monkeypatch):
    monkeypatch.setattr(cli, "stdin_is_interactive", lambda: True)
    # task, scheduler, plateau patience, amp, clip, max grad norm, grad accum, warm-up steps,
    # early stopping, patience, distributed, ema, ema decay, compile, seed
    typed = "regression\nplateau\n3\ny\ny\n2.5\n3\n100\ny\n6\ny\ny\n0.99\ny\n7\n"
    result = invoke("new", str(tmp_path / "asked"), "--no-smoke", input=typed)
    assert result.exit_code == 0, result.output
    asked = tmp_path / "asked"
    assert answers(asked, "task", "scheduler", "plateau_patience") == ("regression", "plateau", 3)
    assert answers(asked, "amp", "clip", "max_grad_norm") == (True, True, 2.5)
    assert answers(asked, "grad_accum", "warmup_steps") == (3, 100)
    assert answers(asked, "early_stopping", "patience", "seed") == (True, 6, 7)
    assert answers(asked, "distributed", "ema", "ema_decay") == (True, True, 0.99)
    assert answers(asked, "compile") == (True,)
    assert "What the model predicts" in result.output  # each question comes with its explanation


def test_interactive_run_asks_again_for_an_invalid_patience(tmp_path, monkeypatch):
    monkeypatch.setattr(cli, "stdin_is_interactive", lambda: True)
    # task, scheduler, plateau patience 6, amp, clip, grad accum, warm-up steps, early
    # stopping, patience 4 (refused), 8, distributed, ema, compile, seed
    typed = "classification\nplateau\n6\nn\nn\n\n\ny\n4\n8\n\n\n\n\n"
    result = invoke("new", str(tmp_path / "again"), "--no-smoke", input=typed)
    assert result.exit_code == 0, result.output
    assert "  must be larger than the plateau patience (6), or training stops" in result.output
    assert "patience [7]" in result.output  # the default offered is a valid one
    assert answers(tmp_path / "again", "plateau_patience", "patience") == (6, 8)


def test_interactive_run_skips_questions_answered_by_flags(tmp_path, monkeypatch):
    monkeypatch.setattr(cli, "stdin_is_interactive", lambda: True)
    typed = "n\nn\n\n\nn\nn\n\n\n"  # amp, clip, accum, warm-up, ddp, ema, compile, seed
    result = invoke(
        "new", str(tmp_path / "half"), "--task", "classification", "--scheduler", "cosine",
        "--early-stopping", "--patience", "3", "--no-smoke", input=typed,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    got = answers(tmp_path / "half", "amp", "clip", "early_stopping", "patience", "seed")
    assert got == (False, False, True, 3, 42)
    assert answers(tmp_path / "half", "distributed") == (False,)


@pytest.mark.parametrize(
    "name",
    ["2fast", "class", "{{x}}", "a;b", "$(id)", "x y", "..", "../up", "", "torch", "ends.", "json"]
    + ["src", "pytest", "a" * 240, "a" * 255, "a" * 256, "a" * 300],
)
def test_bad_names_exit_2_with_one_line_and_write_nothing(tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    result = invoke("new", name, "-y", "--no-smoke")
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert result.output.startswith("error: ")
    assert list(tmp_path.iterdir()) == []


def test_patience_not_above_plateau_patience_is_refused(tmp_path):
    dest = tmp_path / "p"
    result = invoke(
        "new", str(dest), "-y", "--scheduler", "plateau", "--plateau-patience", "3",
        "--early-stopping", "--patience", "3", "--no-smoke",
    )  # fmt: skip
    assert result.exit_code == 2
    assert result.output == (
        "error: --patience 3: must be larger than the plateau patience (3), "
        "or training stops before the learning rate is ever lowered\n"
    )
    assert not dest.exists()


def test_bad_choice_is_one_line_exit_2(tmp_path):
    result = invoke("new", str(tmp_path / "p"), "--task", "segmentation")
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and "segmentation" in result.output
    assert not (tmp_path / "p").exists()


def test_existing_non_empty_folder_is_refused(tmp_path):
    dest = tmp_path / "taken"
    dest.mkdir()
    (dest / "notes.txt").write_text("mine")
    result = invoke("new", str(dest), "-y", "--no-smoke")
    assert result.exit_code == 2
    assert "exists and is not empty" in result.output
    assert [p.name for p in dest.iterdir()] == ["notes.txt"]


def test_existing_empty_folder_is_used(tmp_path):
    (tmp_path / "empty").mkdir()
    assert invoke("new", str(tmp_path / "empty"), "-y", "--no-smoke").exit_code == 0
    assert (tmp_path / "empty" / "pyproject.toml").is_file()


def test_force_keeps_every_user_file(tmp_path):
    dest = tmp_path / "mine"
    (dest / "data").mkdir(parents=True)
    (dest / "data" / "table.csv").write_text("a,target\n1,0\n")
    (dest / "README.md").write_text("my notes\n")
    result = invoke("new", str(dest), "-y", "--no-smoke", "--force")
    assert result.exit_code == 0, result.output
    assert (dest / "data" / "table.csv").read_text() == "a,target\n1,0\n"
    assert (dest / "README.md.orig").read_text() == "my notes\n"
    assert (dest / "README.md").read_text().startswith("# mine")
    assert "README.md.orig" in result.output


def test_interrupted_render_leaves_nothing(tmp_path, monkeypatch):
    import copier

    def interrupted(src, dst, **kwargs):
        (tmp_path / "staging-seen").write_text(str(dst))
        raise KeyboardInterrupt

    monkeypatch.setattr(copier, "run_copy", interrupted)
    result = invoke("new", str(tmp_path / "half"), "-y", "--no-smoke")
    assert result.exit_code == 130
    assert sorted(p.name for p in tmp_path.iterdir()) == ["staging-seen"]


def test_quiet_prints_nothing(tmp_path):
    result = invoke("new", str(tmp_path / "q"), "-y", "--no-smoke", "--quiet")
    assert result.exit_code == 0 and result.output == ""


def test_rendering_uncommitted_template_edits_warns_even_when_quiet(tmp_path, monkeypatch):
    # scaffold's own checkout with uncommitted edits under template/ (this checkout is kept
    # clean in CI, so the finding is forced here; tests/test_update_probes.py tests the finding).
    monkeypatch.setattr("scaffold.source.has_uncommitted_template", lambda source: True)
    for extra in ([], ["--quiet"]):
        result = invoke("new", str(tmp_path / f"p{len(extra)}"), "-y", "--no-smoke", *extra)
        assert result.exit_code == 0, result.output
        warning = [line for line in result.output.splitlines() if line.startswith("warning: ")]
        assert warning == [
            "warning: rendered from uncommitted template edits; the project records a commit "
            "that exists nowhere, so scaffold update will not work for it; commit the template "
            "and render again"
        ], result.output
        if extra:
            assert result.output.splitlines() == warning  # --quiet: the warning and nothing else


def test_version_and_help():
    assert invoke("--version").output == f"scaffold {scaffold.__version__}\n"
    top = invoke("--help")
    assert top.exit_code == 0 and "new" in top.output
    sub = invoke("new", "--help")
    flags = "--task --scheduler --amp --clip --max-grad-norm --early-stopping --patience --seed"
    for flag in flags.split() + ["--defaults", "--smoke", "--force", "--quiet"]:
        assert flag in sub.output, flag
    # Every option shows its default; help lines wrap, so compare without the line breaks.
    text = " ".join(sub.output.split())
    for default in ["classification", "cosine", "2", "off", "1.0", "5", "42"]:
        assert f"[default: {default}]" in text, default
    assert "(with --scheduler plateau). [default: 2]" in text
    assert "(with --clip). [default: 1.0]" in text


def test_help_does_not_import_copier_or_torch():
    code = (
        "import sys; from scaffold.cli import app\n"
        "try:\n    app(['--help'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('copier', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, cwd=REPO).stdout
    assert out.strip().splitlines()[-1] == "[]"


@pytest.mark.slow
def test_smoke_check_reports_the_loss_falling(tmp_path):
    result = invoke("new", str(tmp_path / "smoked"), "-y", "--task", "regression", "--smoke")
    assert result.exit_code == 0, result.output
    line = next(x for x in result.output.splitlines() if x.startswith("smoke check"))
    assert line.startswith("smoke check passed on cpu: loss ")
    first, last = (float(v) for v in line.split("loss ")[1].split(" in ")[0].split(" -> "))
    assert last < 0.01 * first
