"""`scaffold check` as a command: formats, exit codes, pyproject settings, --fix/--diff, hook."""

import json
import os
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from scaffold import cli
from scaffold.check import fix as fixes
from scaffold.check.rules import RULES
from tests.conftest import REPO

runner = CliRunner()

BUGGY = """import torch


def fit(model, opt, loader):
    for x in loader:
        loss = model(x).sum()
        loss.backward()
        opt.zero_grad()  # fresh gradients for the next batch
        opt.step()
    state = torch.load(
        "m.pt",
        map_location="cpu",
    )
    opt.load_state_dict(state)
    model.load_state_dict(torch.load("last.pt"))
"""

FIXED = """import torch


def fit(model, opt, loader):
    for x in loader:
        loss = model(x).sum()
        opt.zero_grad()  # fresh gradients for the next batch
        loss.backward()
        opt.step()
    state = torch.load(
        "m.pt",
        map_location="cpu",
        weights_only=True,
    )
    opt.load_state_dict(state)
    model.load_state_dict(torch.load("last.pt", weights_only=True))
"""

CLEAN = "import torch\n\nstate = torch.load('m.pt', weights_only=True)\n"


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A folder of its own as the current one: settings are looked for from here up."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "loop.py").write_text(BUGGY)
    return tmp_path


def invoke(*args):
    return runner.invoke(cli.app, ["check", *args])


def codes(result) -> list[str]:
    return [finding["code"] for finding in json.loads(result.stdout)]


def test_help_shows_plain_path_metavar():
    result = invoke("--help")
    assert result.exit_code == 0
    assert " check [OPTIONS] PATH...\n" in result.stdout and "{PATH}" not in result.stdout


# --- formats and exit codes ---


def test_exit_codes_0_clean_1_findings_2_unreadable(project):
    (project / "ok.py").write_text(CLEAN)
    assert invoke("ok.py").exit_code == 0
    assert invoke("loop.py").exit_code == 1
    result = invoke("loop.py", "gone.py")
    assert result.exit_code == 2
    assert result.stderr == "error: gone.py: no such file or folder\n"


def test_text_and_github_formats(project):
    text = invoke("loop.py").stdout.splitlines()
    assert text[0].startswith("loop.py:8:9: SCF201 zero_grad() between backward() and step()")
    assert text[-1] == "3 findings in 1 file"
    github = invoke("--format", "github", "loop.py").stdout.splitlines()
    assert len(github) == 3
    assert github[0].startswith("::error title=scaffold check SCF201,file=loop.py,line=8,col=9::")


def test_json_format(project):
    result = invoke("--format", "json", "loop.py")
    assert result.exit_code == 1
    first = json.loads(result.stdout)[0]
    assert first == {
        "path": "loop.py",
        "line": 8,
        "column": 9,
        "code": "SCF201",
        "rule": "R2",
        "message": RULES["SCF201"].message,
        "fix": RULES["SCF201"].fix,
    }


def test_sarif_format_has_the_fields_code_scanning_reads(project):
    (project / "sub").mkdir()
    (project / "sub" / "two words.py").write_text(BUGGY)
    result = invoke("--format", "sarif", "loop.py", str(project / "sub"))
    assert result.exit_code == 1
    log = json.loads(result.stdout)
    assert log["version"] == "2.1.0" and log["$schema"].endswith("sarif-2.1.0.json")
    (run,) = log["runs"]
    driver = run["tool"]["driver"]
    assert driver["name"] == "scaffold check"
    assert [r["id"] for r in driver["rules"]] == list(RULES)
    for rule in driver["rules"]:
        assert rule["shortDescription"]["text"] == RULES[rule["id"]].message
        assert RULES[rule["id"]].fix in rule["help"]["text"]
    assert len(run["results"]) == 6
    for result in run["results"]:
        assert driver["rules"][result["ruleIndex"]]["id"] == result["ruleId"]
        assert result["level"] in ("error", "warning")
        assert result["message"]["text"]
        (location,) = result["locations"]
        place = location["physicalLocation"]
        assert set(place["region"]) == {"startLine", "startColumn"}
    places = [r["locations"][0]["physicalLocation"] for r in run["results"]]
    # Relative to the folder the check ran in, with forward slashes, even for absolute paths.
    assert places[0]["artifactLocation"]["uri"] == "loop.py"
    assert places[0]["region"] == {"startLine": 8, "startColumn": 9}
    assert places[-1]["artifactLocation"]["uri"] == "sub/two%20words.py"
    assert run["originalUriBaseIds"]["SRCROOT"]["uri"] == project.as_uri() + "/"


def test_sarif_of_a_clean_run_has_no_results(project):
    (project / "ok.py").write_text(CLEAN)
    result = invoke("--format", "sarif", "ok.py")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["runs"][0]["results"] == []


# --- settings in pyproject.toml ---


def settings(folder: Path, body: str) -> None:
    (folder / "pyproject.toml").write_text(f'[project]\nname = "x"\n\n{body}')


def test_select_ignore_and_exclude_from_pyproject(project):
    (project / "generated").mkdir()
    (project / "generated" / "old.py").write_text(BUGGY)
    (project / "vendored_loop.py").write_text(BUGGY)
    settings(
        project,
        '[tool.scaffold.check]\nselect = ["R2", "C3"]\nignore = ["SCF201"]\n'
        'exclude = ["generated/", "vendored_*.py"]\n',
    )
    result = invoke("--format", "json", ".")
    assert result.exit_code == 1
    found = json.loads(result.stdout)
    assert {f["path"] for f in found} == {"./loop.py"}
    assert [f["code"] for f in found] == ["SCF2301", "SCF2301"]
    # A file named on the command line, as pre-commit names them, is excluded too.
    assert invoke("vendored_loop.py", "generated/old.py").stdout == "0 findings in 0 files\n"


def test_flags_replace_the_settings_and_extend_ignore_stays(project):
    settings(project, '[tool.scaffold.check]\nignore = ["C3"]\nextend-ignore = ["R2"]\n')
    assert invoke("loop.py").exit_code == 0  # C3 and R2 ignored
    result = invoke("--format", "json", "--ignore", "R4", "loop.py")
    assert codes(result) == ["SCF2301", "SCF2301"]  # --ignore replaced C3; R2 still ignored
    settings(project, '[tool.scaffold.check]\nselect = ["C3"]\n')
    result = invoke("--format", "json", "--select", "R2", "loop.py")
    assert codes(result) == ["SCF201"]


def test_the_nearest_pyproject_with_settings_is_used(project, monkeypatch):
    settings(project, '[tool.scaffold.check]\nignore = ["C3"]\n')
    inner = project / "pkg" / "sub"
    inner.mkdir(parents=True)
    settings(project / "pkg", "[tool.ruff]\nline-length = 100\n")  # not ours: skipped
    (inner / "loop.py").write_text(BUGGY)
    monkeypatch.chdir(inner)
    assert codes(invoke("--format", "json", "loop.py")) == ["SCF201"]
    settings(inner, '[tool.scaffold.check]\nignore = ["R2"]\n')
    assert codes(invoke("--format", "json", "loop.py")) == ["SCF2301", "SCF2301"]


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("[tool.scaffold.check\nselect = 1\n", "not valid TOML: "),
        ('[tool.scaffold.check]\nselct = ["R2"]\n', "has no setting 'selct'; settings: "),
        ('[tool.scaffold.check]\nselect = "R2"\n', "select must be a list of strings"),
        ("[tool.scaffold.check]\nexclude = [1]\n", "exclude must be a list of strings"),
        ('[tool.scaffold.check]\nignore = ["SCF999"]\n', "ignore: no check is named 'SCF999'"),
        ('[tool.scaffold]\ncheck = "all"\n', "tool.scaffold.check must be a table"),
    ],
)
def test_bad_settings_are_one_line_and_exit_2(project, body, says):
    settings(project, body)
    result = invoke("loop.py")
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: {project / 'pyproject.toml'}: ") and says in line
    assert result.stdout == ""


# --- --fix and --diff ---


def test_fix_makes_the_unambiguous_fixes_and_keeps_the_formatting(project):
    path = project / "loop.py"
    path.chmod(0o640)
    result = invoke("--fix", "loop.py")
    assert result.exit_code == 0, result.output
    assert result.stdout == "fixed 3, 0 left in 1 file\n"
    assert path.read_text() == FIXED
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert invoke("loop.py").exit_code == 0  # the fixed file checks clean
    assert [p.name for p in project.iterdir()] == ["loop.py"]  # no temporary file left


def test_fix_keeps_line_endings_and_trailing_commas(project):
    path = project / "loop.py"
    path.write_bytes(BUGGY.replace("\n", "\r\n").encode())
    assert invoke("--fix", "loop.py").exit_code == 0
    assert path.read_bytes() == FIXED.replace("\n", "\r\n").encode()
    path.write_text(
        "import torch\n\nm.load_state_dict(torch.load('a.pt',))\nm.load_state_dict(torch.load(\n"
        "    ('b.pt')  # why\n))\nm.load_state_dict(torch.load(\n    'c.pt', map_location='cpu'))\n"
    )
    assert invoke("--fix", "loop.py").stdout == "fixed 3, 0 left in 1 file\n"
    assert path.read_text() == (
        "import torch\n\nm.load_state_dict(torch.load('a.pt', weights_only=True,))\n"
        "m.load_state_dict(torch.load(\n    ('b.pt'),  # why\n    weights_only=True,\n))\n"
        "m.load_state_dict(torch.load(\n    'c.pt', map_location='cpu', weights_only=True))\n"
    )


UNFIXABLE = """import torch


def fit(model, opt, loader, k):
    for i, x in enumerate(loader):
        loss = model(x).sum()
        loss.backward()
        if i % k == 0:
            opt.zero_grad()
            opt.step()
        else:
            opt.zero_grad(); opt.step()
"""


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (
            UNFIXABLE.replace("if i % k == 0", "if True"),
            "no backward() before it in the same block",
        ),
        (
            BUGGY.replace("opt.zero_grad()  #", "opt.zero_grad(\n            set_to_none=True)  #"),
            "zero_grad() is not alone on its line",
        ),
        (
            BUGGY.replace("loss.backward()", "loss.backward()\n        loss.backward()"),
            "several backward() calls before it in this block",
        ),
        (
            BUGGY.replace("loss.backward()", "x = 1; loss.backward()"),
            "the backward() statement shares its line",
        ),
    ],
)
def test_an_ambiguous_zero_grad_is_left_and_reported(project, text, why):
    path = project / "loop.py"
    path.write_text(text)
    before = invoke("--format", "json", "loop.py")
    assert "SCF201" in codes(before)
    result = invoke("--fix", "loop.py")
    assert result.exit_code == 1
    assert f": SCF201 not fixed: {why}\n" in result.stderr
    assert "SCF201" in result.stdout and "SCF2301" not in result.stdout
    assert "weights_only=True" in path.read_text() or "torch.load" not in text


def test_not_fixable_zero_grad_on_a_shared_line(project):
    path = project / "loop.py"
    path.write_text(UNFIXABLE)
    result = invoke("--fix", "loop.py")
    assert result.exit_code == 1
    assert "loop.py:12:13: SCF201 not fixed: zero_grad() is not alone on its line" in result.stderr
    assert path.read_text() == UNFIXABLE


def test_diff_prints_the_fixes_and_changes_nothing(project):
    path = project / "loop.py"
    result = invoke("--diff", "loop.py")
    assert result.exit_code == 1
    assert result.stdout.startswith("--- loop.py\n+++ loop.py\n@@ ")
    assert "+        opt.zero_grad()  # fresh gradients for the next batch\n" in result.stdout
    assert '+    model.load_state_dict(torch.load("last.pt", weights_only=True))\n' in result.stdout
    assert result.stderr == "would fix 3, 0 left\n"
    assert path.read_text() == BUGGY
    (project / "ok.py").write_text(CLEAN)
    result = invoke("--diff", "ok.py")
    assert (result.exit_code, result.stdout) == (0, "")


def test_noqa_and_ignored_findings_are_not_fixed(project):
    path = project / "loop.py"
    path.write_text(BUGGY.replace('"last.pt"))', '"last.pt"))  # noqa: SCF2301'))
    result = invoke("--fix", "--ignore", "R2", "loop.py")
    assert result.stdout == "fixed 1, 0 left in 1 file\n"
    text = path.read_text()
    assert 'torch.load("last.pt"))  # noqa' in text and "loss.backward()\n        opt.zero" in text


def test_a_fix_that_would_not_parse_is_not_written(project, monkeypatch):
    monkeypatch.setattr(fixes, "_add_weights_only", lambda source, call: [(0, 0, "(")])
    result = invoke("--fix", "--select", "C3", "loop.py")
    assert result.exit_code == 1
    assert "SCF2301 not fixed: the fixed file would not parse" in result.stderr
    assert (project / "loop.py").read_text() == BUGGY


def test_a_read_only_file_is_one_line_and_left_alone(project):
    path = project / "loop.py"
    path.chmod(0o444)
    result = invoke("--fix", "loop.py")
    assert result.exit_code == 2
    assert result.stderr == "error: loop.py: cannot write: read-only file; left unchanged\n"
    assert path.read_text() == BUGGY
    assert "fixed 0, 3 left in 1 file" in result.stdout


def test_fix_with_json_keeps_stdout_parseable(project):
    result = invoke("--fix", "--format", "json", "loop.py")
    assert result.exit_code == 0
    assert json.loads(result.stdout) == []
    assert result.stderr == "fixed 3, 0 left in 1 file\n"


# --- the pre-commit hook ---


def test_pre_commit_hook_runs_scaffold_check_on_the_files_it_is_given(tmp_path):
    (hook,) = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    assert hook["id"] == "scaffold-check"
    assert hook["entry"] == "scaffold check"
    assert hook["language"] == "python" and hook["types"] == ["python"]
    # pre-commit runs the entry from the repository root with the staged files' paths.
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "train.py").write_text(BUGGY)
    (tmp_path / "ok.py").write_text(CLEAN)
    command, *args = shlex.split(hook["entry"])
    script = Path(sys.executable).parent / command
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    run = subprocess.run(
        [str(script), *args, "pkg/train.py", "ok.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert run.returncode == 1, run.stderr
    assert run.stdout.splitlines()[0].startswith("pkg/train.py:8:9: SCF201 ")
    assert run.stdout.splitlines()[-1] == "3 findings in 2 files"
    clean = subprocess.run(
        [str(script), *args, "ok.py"], cwd=tmp_path, capture_output=True, timeout=60, env=env
    )
    assert clean.returncode == 0


def test_zero_grad_moves_above_the_statement_that_holds_the_backward(project):
    path = project / "loop.py"
    path.write_text(
        "def fit(model, opt, loader):\n"
        "    for x in loader:\n"
        "        if x is not None:\n"
        "            model(x).sum().backward()\n"
        "        opt.zero_grad()\n"
        "        opt.step()"  # and no line break at the end of the file
    )
    assert invoke("--fix", "loop.py").stdout == "fixed 1, 0 left in 1 file\n"
    assert path.read_text() == (
        "def fit(model, opt, loader):\n"
        "    for x in loader:\n"
        "        opt.zero_grad()\n"
        "        if x is not None:\n"
        "            model(x).sum().backward()\n"
        "        opt.step()"
    )


def test_a_folder_without_python_files_warns_and_exits_0(tmp_path):
    (tmp_path / "notes.txt").write_text("no code here")
    result = CliRunner().invoke(cli.app, ["check", str(tmp_path)])
    assert result.exit_code == 0
    assert result.stderr.strip() == f"warning: no Python file found in {tmp_path}"


# Issue 25: --fix adds weights_only=True only where the loaded value is used as a state dict;
# a file holding pickled objects (a whole model, an argparse.Namespace, a config) would then
# raise UnpicklingError, so those loads are left, with what to do on each torch version.
LOADS = {
    "a whole model": ("def f(p):\n    model = torch.load(p)\n    model.eval()\n", ".eval"),
    "a Namespace read by key": (
        "def f(p, m):\n    ckpt = torch.load(p)\n    m.load_state_dict(ckpt['model'])\n"
        "    args = ckpt['args']\n",
        "read by key (args)",
    ),
    "a module-level name": ("model = torch.load('m.pt')\n", "module-level name"),
    "returned": ("def f(p):\n    return torch.load(p)\n", "returned"),
    "a checkpoint whose save holds a config (Swin)": (
        "def save(m, config, p):\n    torch.save({'model': m.state_dict(), 'config': config}, p)\n"
        "def load(m, p):\n    ckpt = torch.load(p)\n    m.load_state_dict(ckpt['model'])\n",
        "stores config",
    ),
}


@pytest.mark.parametrize("name", list(LOADS))
def test_loads_of_pickled_objects_are_left_with_the_way_out(project, name):
    text, why = LOADS[name]
    path = project / "loop.py"
    path.write_text("import torch\n\n" + text)
    result = invoke("--fix", "--select", "C3", "loop.py")
    assert result.exit_code == 1, result.output
    assert path.read_text() == "import torch\n\n" + text
    assert "SCF2301 not fixed: its result is" in result.stderr and why in result.stderr
    assert "add_safe_globals" in result.stderr and "2.6" in result.stderr


def test_loads_of_state_dicts_are_fixed(project):
    path = project / "loop.py"
    path.write_text(
        "import torch\n\ndef f(m, opt, p):\n    ckpt = torch.load(p, map_location='cpu')\n"
        "    m.load_state_dict(ckpt['model'])\n    opt.load_state_dict(ckpt.get('optimizer'))\n"
        "    start = ckpt['epoch'] + 1\n    print(f\"epoch {ckpt['epoch']}\")\n"
        "    return start\n"
    )
    result = invoke("--fix", "loop.py")
    assert (result.exit_code, result.stdout) == (0, "fixed 1, 0 left in 1 file\n")
    assert "torch.load(p, map_location='cpu', weights_only=True)" in path.read_text()


def test_imported_helpers_left_unchecked_are_named(project):
    (project / "engine.py").write_text(
        "def fit(model, opt, loader):\n    for x in loader:\n        opt.zero_grad()\n"
        "        model(x).sum().backward()\n        opt.step()\n"
    )
    (project / "pkg").mkdir()
    (project / "pkg" / "__init__.py").write_text("")
    (project / "pkg" / "data.py").write_text("def loader():\n    return []\n")
    (project / "train.py").write_text(
        "import torch\nimport numpy as np\nfrom engine import fit\nfrom pkg.data import loader\n"
        "fit(torch.nn.Linear(2, 1), None, loader())\n"
    )
    result = invoke("train.py")
    assert result.exit_code == 0
    notes = [line for line in result.stderr.splitlines() if line.startswith("note: ")]
    assert notes == [
        "note: train.py imports engine.py, which was not checked: its helpers were not "
        "followed (give it too, or its folder)",
        "note: train.py imports pkg/data.py, which was not checked: its helpers were not "
        "followed (give it too, or its folder)",
    ]
    assert invoke(".").stderr == ""  # everything checked: nothing to name
