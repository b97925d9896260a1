"""Bad inputs and faults for scaffold update: each ends in one line, a non-zero exit, and the
project exactly as it was (same commit, clean tree).

Remote sources are hosts under .invalid (a name that never resolves) and gh: shortcuts
rewritten to such a host, so these tests behave the same with or without a network.
"""

import re
import shutil
import subprocess
import sys
import tempfile

import pytest
import yaml
from typer.testing import CliRunner

from scaffold import cli
from tests.test_update import (
    answers,
    commit_all,
    git,
    isolate_git_and_home,
    make_template_repo,
    new_project,
    release_version_b,
    update,
)

runner = CliRunner()
UNREACHABLE = {
    "scp": "git@nowhere.invalid:team/template.git",
    "ssh": "ssh://git@nowhere.invalid/team/template.git",
    "https": "https://nowhere.invalid/team/template.git",
    "gh": "gh:team/template",
}


@pytest.fixture
def template_repo(tmp_path):
    return make_template_repo(tmp_path)


@pytest.fixture(autouse=True)
def offline_git(monkeypatch, tmp_path):
    isolate_git_and_home(monkeypatch, tmp_path)
    # gh: means github.com: send it to a host that never resolves, network or not. And keep
    # copier's cache of remote templates out of the user's home.
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "url.https://nowhere.invalid/.insteadOf")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "https://github.com/")
    monkeypatch.setenv("COPIER_CACHE_DIR", str(tmp_path / "copier-cache"))


def state(project) -> tuple[str, str, bytes]:
    """The commit, the status and the answers file: all must survive a failed update."""
    return (
        git(project, "rev-parse", "HEAD"),
        git(project, "status", "--porcelain", "--untracked-files=all"),
        (project / ".copier-answers.yml").read_bytes(),
    )


def one_line_error(result, code: int, *parts: str) -> None:
    lines = result.output.strip().splitlines()
    assert result.exit_code == code, result.output
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    for part in parts:
        assert part in lines[0], lines[0]


def record_source(project, src: str) -> None:
    """Make the project record another template source, as a team's project would."""
    path = project / ".copier-answers.yml"
    data = yaml.safe_load(path.read_text())
    path.write_text(
        path.read_text().replace(f"_src_path: {data['_src_path']}", f"_src_path: {src}")
    )
    assert answers(project)["_src_path"] == src
    commit_all(project, f"record {src}")


@pytest.mark.parametrize("kind", sorted(UNREACHABLE))
@pytest.mark.parametrize("check", [False, True], ids=["update", "check"])
def test_unreachable_recorded_source_is_named_and_nothing_changes(
    tmp_path, template_repo, kind, check
):
    project = new_project(tmp_path, template_repo)
    record_source(project, UNREACHABLE[kind])
    before = state(project)
    result = update(project, *(["--check"] if check else ["--set", "amp=true"]))
    one_line_error(result, 1, f"cannot reach {UNREACHABLE[kind]}: ")
    assert "resolve host" in result.output.lower() or "hostname" in result.output
    assert state(project) == before


@pytest.mark.parametrize("kind", ["scp", "https", "gh"])
def test_unreachable_template_option_changes_nothing(tmp_path, template_repo, kind):
    project = new_project(tmp_path, template_repo)
    before = state(project)
    result = update(project, "--template", UNREACHABLE[kind])
    one_line_error(result, 1, f"cannot reach {UNREACHABLE[kind]}")
    assert state(project) == before


def test_missing_template_option_is_a_usage_error(tmp_path, template_repo):
    project = new_project(tmp_path, template_repo)
    before = state(project)
    result = update(project, "--template", str(tmp_path / "no-such-template"))
    one_line_error(result, 2, "template source not found: ", "no-such-template")
    assert state(project) == before


def test_template_without_the_recorded_commit_commits_nothing(tmp_path, template_repo):
    project = new_project(tmp_path, template_repo)
    other = tmp_path / "other-template"  # the same files, another history
    git(tmp_path, "init", "-q", "-b", "main", str(other))
    subprocess.run(
        [
            "cp",
            "-r",
            str(template_repo / "copier.yml"),
            str(template_repo / "template"),
            str(other),
        ],
        check=True,
    )
    commit_all(other, "unrelated history")
    before = state(project)
    result = update(project, "--template", str(other))
    one_line_error(
        result, 1, f"{other} does not have template commit {answers(project)['_commit']}"
    )
    assert state(project) == before
    assert update(project).exit_code == 0  # later updates still work


def test_copier_failure_after_repointing_restores_the_project(tmp_path, template_repo):
    """The new source has the old commit, but its new version does not render."""
    project = new_project(tmp_path, template_repo)
    fork = tmp_path / "fork"
    git(tmp_path, "clone", "-q", str(template_repo), str(fork))
    engine = fork / "template" / "src" / "{{package_name}}" / "engine.py.jinja"
    engine.write_text(engine.read_text() + "\n{{ no_such_answer }}\n")
    commit_all(fork, "broken")
    before = state(project)
    result = update(project, "--template", str(fork))
    one_line_error(result, 1, "copier could not update the project: ", "the project is as it was")
    assert state(project) == before
    assert git(project, "rev-list", "--count", "HEAD") == "1"  # scaffold new's commit only
    release_version_b(template_repo)
    later = update(project)
    assert later.exit_code == 0, later.output
    assert "CHANGELOG.md" in git(project, "status", "--porcelain")


def test_interrupt_during_copier_restores_the_project(tmp_path, template_repo, monkeypatch):
    import copier

    project = new_project(tmp_path, template_repo)
    fork = tmp_path / "fork"
    git(tmp_path, "clone", "-q", str(template_repo), str(fork))
    before = state(project)

    def half_done(dst, **kwargs):
        (dst / "README.md").write_text("half written")
        (dst / "stray.py").write_text("x = 1\n")
        raise KeyboardInterrupt

    monkeypatch.setattr(copier, "run_update", half_done)
    result = update(project, "--template", str(fork))
    assert result.exit_code == 130, result.output
    assert state(project) == before
    assert not (project / "stray.py").exists()


@pytest.mark.parametrize("check", [False, True], ids=["update", "check"])
def test_unknown_to_ref_names_the_ref_and_the_source(tmp_path, template_repo, check):
    project = new_project(tmp_path, template_repo)
    release_version_b(template_repo)
    before = state(project)
    result = update(project, "--to", "no-such-ref", *(["--check"] if check else []))
    one_line_error(
        result,
        2,
        f"--to no-such-ref: {template_repo} has no tag, branch or commit named no-such-ref",
    )
    assert "was it rendered" not in result.output
    assert state(project) == before


def test_to_a_tag_and_check_against_tags(tmp_path, template_repo):
    git(template_repo, "tag", "v1.0")
    project = new_project(tmp_path, template_repo)
    assert answers(project)["_commit"] == "v1.0"  # copier records the tag it rendered
    release_version_b(template_repo)
    # Without --to, copier takes the latest release tag: still v1.0, so nothing is newer.
    assert update(project, "--check").output.startswith("up to date with template v1.0")
    git(template_repo, "tag", "-a", "v1.1", "-m", "B")
    check = update(project, "--check")
    assert check.exit_code == 0 and "a newer template is available: v1.0 -> " in check.output
    result = update(project, "--to", "v1.1")
    assert result.exit_code == 0, result.output
    assert answers(project)["_commit"] == "v1.1"
    assert (project / "CHANGELOG.md").is_file()


BAD_ANSWERS = {
    "not YAML": ("_src_path: [unclosed\n_commit: abc\n", "not valid YAML"),
    "a list": ("- one\n- two\n", "holds list, not copier's answers"),
    "empty": ("", ".copier-answers.yml is empty; restore it from git"),
    "a string": ("just words\n", "holds str, not copier's answers"),
    "no _src_path": ("_commit: abc1234\ntask: regression\n", "has no _src_path"),
    "no _commit": ("_src_path: /somewhere\ntask: regression\n", "has no _commit"),
    "not UTF-8": (b"_src_path: \xff\xfe\n", "cannot read"),
}


@pytest.mark.parametrize("case", sorted(BAD_ANSWERS))
@pytest.mark.parametrize("check", [False, True], ids=["update", "check"])
def test_bad_answers_file_is_one_line(tmp_path, template_repo, case, check):
    project = new_project(tmp_path, template_repo)
    text, message = BAD_ANSWERS[case]
    path = project / ".copier-answers.yml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    commit_all(project, f"answers: {case}")
    before = state(project)
    result = update(project, *(["--check"] if check else []))
    one_line_error(result, 2, ".copier-answers.yml", message)
    assert state(project) == before


def test_gone_local_source_is_named_not_replaced(tmp_path, template_repo):
    project = new_project(tmp_path, template_repo)
    gone = tmp_path / "moved-away"
    template_repo.rename(gone)
    before = state(project)
    result = update(project)
    one_line_error(result, 1, f"the template source {template_repo} recorded in", "--template SRC")
    assert state(project) == before
    # With the copy named, the update goes ahead and the project records the copy.
    moved = update(project, "--template", str(gone))
    assert moved.exit_code == 0, moved.output
    assert answers(project)["_src_path"] == str(gone)


def test_gone_copy_of_scaffolds_own_template_is_repointed_and_said(
    tmp_path, monkeypatch, template_repo
):
    from scaffold import source

    # scaffold's own template: a clean checkout (this one may hold uncommitted edits).
    monkeypatch.setattr(source, "PACKAGED", tmp_path / "no-wheel")
    monkeypatch.setattr(source, "CHECKOUT", template_repo)
    result = runner.invoke(cli.app, ["new", str(tmp_path / "own"), "-y", "--no-smoke"])
    assert result.exit_code == 0, result.output
    project = tmp_path / "own"
    assert answers(project)["_src_path"] == str(template_repo)
    gone = str(tmp_path / "old-home" / "template.bundle")  # scaffold's bundle, home since moved
    record_source(project, gone)
    updated = update(project)
    assert updated.exit_code == 0, updated.output
    assert f"the recorded template source {gone} is gone; it was scaffold's own" in updated.output
    assert answers(project)["_src_path"] == str(template_repo)
    assert (
        git(project, "log", "-1", "--format=%s")
        == f"scaffold: record template source {template_repo}"
    )


def test_reachable_file_url_is_a_remote_that_updates(tmp_path, template_repo):
    url = f"file://{template_repo}"
    project = new_project(tmp_path, template_repo)
    moved = update(project, "--template", url)
    assert moved.exit_code == 0, moved.output
    assert answers(project)["_src_path"] == f"git+{url}"  # what copier needs to clone it
    commit_all(project, "now from the URL")
    release_version_b(template_repo)
    check = update(project, "--check")
    assert "a newer template is available" in check.output, check.output
    assert update(project).exit_code == 0
    assert (project / "CHANGELOG.md").is_file()


def test_untracked_files_beside_the_template_do_not_make_a_phantom_commit(tmp_path, template_repo):
    """The README's demo/ inside the checkout: the project must record a real commit."""
    (template_repo / "demo").mkdir()
    (template_repo / "demo" / "notes.txt").write_text("not the template")
    project = new_project(tmp_path, template_repo)
    recorded = answers(project)["_commit"]
    assert git(template_repo, "rev-parse", "HEAD").startswith(recorded)
    check = update(project, "--check")
    assert check.output.startswith(f"up to date with template {recorded}"), check.output


def test_builtin_checkout_source_pins_the_commit_unless_the_template_is_edited(
    tmp_path, monkeypatch, template_repo
):
    from scaffold import source

    monkeypatch.setattr(source, "PACKAGED", tmp_path / "no-wheel")
    monkeypatch.setattr(source, "CHECKOUT", template_repo)
    (template_repo / "demo").mkdir()
    (template_repo / "demo" / "train.py").write_text("print('a project, not the template')\n")
    head = git(template_repo, "rev-parse", "HEAD")
    pinned = source.builtin_source()
    assert pinned.ref == head and not source.has_uncommitted_template(pinned)
    (template_repo / "copier.yml").write_text((template_repo / "copier.yml").read_text() + "\n")
    edited = source.builtin_source()
    assert edited.ref == "HEAD" and source.has_uncommitted_template(edited)


@pytest.mark.parametrize(
    "src, remote",
    [
        ("git@github.com:team/repo.git", True),
        ("git@host:team/repo", True),
        ("gitlab.example.com:team/repo.git", True),
        ("ssh://git@host:2222/team/repo.git", True),
        ("https://host/team/repo", True),
        ("http://host/team/repo.git", True),
        ("git://host/team/repo.git", True),
        ("file:///srv/templates/repo", True),
        ("git+https://host/team/repo", True),
        ("gh:team/repo", True),
        ("gl:team/repo", True),
        ("/srv/templates/repo", False),
        ("./template", False),
        ("~/templates/repo", False),
        ("relative/folder", False),
        ("C:/templates/repo", False),
    ],
)
def test_one_function_tells_remote_from_local(src, remote):
    from scaffold.source import copier_url, git_url, is_remote

    assert is_remote(src) is remote
    if remote:
        # copier takes every remote as given or with git+ in front; git takes the expansion.
        assert copier_url(src) in (src, "git+" + src)
        assert "://" in git_url(src) or "@" in git_url(src) or ":" in git_url(src)


@pytest.mark.parametrize("kind", ["scp", "https", "gh"])
def test_new_from_an_unreachable_url_is_one_line_and_writes_nothing(tmp_path, kind):
    result = runner.invoke(
        cli.app, ["new", str(tmp_path / "p"), "-y", "--no-smoke", "--template", UNREACHABLE[kind]]
    )
    one_line_error(result, 1, f"cannot reach {UNREACHABLE[kind]}: ")
    assert not [p.name for p in tmp_path.iterdir() if p.name == "p" or p.name.startswith(".p.")]


def test_new_from_a_folder_without_copier_yml_is_refused_and_writes_nothing(tmp_path):
    # copier would render every file of any folder as the project.
    folder = tmp_path / "not-a-template"
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "big.bin").write_bytes(bytes(1 << 20))
    (folder / "copier.yml.bak").write_text("task: x\n")  # a name that only looks like one
    result = runner.invoke(
        cli.app, ["new", str(tmp_path / "p"), "-y", "--no-smoke", "--template", str(folder)]
    )
    one_line_error(result, 2, f"{folder} is not a copier template: it has no copier.yml")
    assert not (tmp_path / "p").exists()


# copier.yml broken in ways people break YAML: an unclosed bracket, a key indented under a
# value, a tab for indentation, an unclosed quote. In a folder, a git repository and a bundle
# (copier reads the last two from a temporary clone, whose path must not be the one named).
BROKEN_YAML = {
    "bracket": "task: [classification\n",
    "indent": "task:\n  type: str\n   default: x\n",
    "tab": "task:\n\ttype: str\n",
    "quote": 'task: "classification\n',
}


@pytest.mark.parametrize("kind", ["folder", "repository", "bundle"])
@pytest.mark.parametrize("broken", BROKEN_YAML)
def test_a_broken_copier_yml_is_one_line_naming_the_template_and_where(
    tmp_path, template_repo, kind, broken
):
    (template_repo / "copier.yml").write_text(BROKEN_YAML[broken])
    source = template_repo
    if kind != "folder":
        commit_all(template_repo, "broken")
    if kind == "bundle":
        source = tmp_path / "template.bundle"
        git(template_repo, "bundle", "create", str(source), "--all")
    if kind == "folder":
        shutil.rmtree(template_repo / ".git")
    result = runner.invoke(
        cli.app, ["new", str(tmp_path / "p"), "-y", "--no-smoke", "--template", str(source)]
    )
    one_line_error(result, 1, f"the template's copier.yml ({source}) is not valid YAML: ")
    assert re.search(r"\(line \d+, column \d+\)$", result.output.strip()), result.output
    assert not (tmp_path / "p").exists()


@pytest.mark.parametrize("template", ["builtin", "repository"])
def test_a_broken_git_config_is_one_line_with_gits_complaint(
    tmp_path, template_repo, monkeypatch, template
):
    # copier runs git (a clone of the template), and git refuses a broken global config;
    # plumbum reports that as an OSError without a reason or a file ("None: None").
    # In a process of its own: plumbum (copier's runner of git) copies the environment once,
    # when it is first imported, so a variable set by a test in this process would not reach it.
    config = tmp_path / "gitconfig"
    config.write_text("[user\nname = x\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    args = [] if template == "builtin" else ["--template", str(template_repo)]
    command = [sys.executable, "-m", "scaffold", "new", str(tmp_path / "p"), "-y", "--no-smoke"]
    result = subprocess.run([*command, *args], capture_output=True, text=True, timeout=120)
    assert result.returncode in (1, 2), result.stdout + result.stderr
    assert result.stdout == ""
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("error: ") and "None" not in line, line
    assert f"bad config line 1 in file {config}" in line, line
    assert not (tmp_path / "p").exists()


def test_new_with_an_unknown_vcs_ref_names_it(tmp_path, template_repo):
    result = runner.invoke(
        cli.app,
        ["new", str(tmp_path / "p"), "-y", "--no-smoke", "--template", str(template_repo)]
        + ["--vcs-ref", "v9"],
    )
    one_line_error(
        result, 2, f"--vcs-ref v9: {template_repo} has no tag, branch or commit named v9"
    )
    assert not (tmp_path / "p").exists()


def test_bundle_source_checks_and_updates(tmp_path, template_repo, monkeypatch):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    git(template_repo, "tag", "-a", "v1.0", "-m", "A")  # annotated: a tag object, not a commit
    bundle = tmp_path / "template.bundle"
    git(template_repo, "bundle", "create", str(bundle), "--all")
    project = new_project(tmp_path, bundle)
    assert answers(project)["_commit"] == "v1.0"
    assert update(project, "--check").output.startswith("up to date with template v1.0")
    release_version_b(template_repo)
    git(template_repo, "tag", "-a", "v1.1", "-m", "B")
    git(template_repo, "bundle", "create", str(bundle), "--all")  # a longer history, same path
    one_line_error(update(project, "--to", "v2.0"), 2, f"{bundle} has no tag, branch or commit")
    assert "a newer template is available: v1.0 -> " in update(project, "--check").output
    result = update(project)
    assert result.exit_code == 0, result.output
    assert answers(project)["_commit"] == "v1.1"
    assert not list(scratch.glob("scaffold-history-*"))  # scratch repositories are gone


def test_random_bytes_as_a_bundle_are_one_line(tmp_path, template_repo):
    project = new_project(tmp_path, template_repo)
    fake = tmp_path / "fake.bundle"
    fake.write_bytes(bytes(range(256)) * 4)
    before = state(project)
    one_line_error(update(project, "--template", str(fake)), 1, f"{fake} is not a readable git")
    assert state(project) == before


def without_git(monkeypatch, tmp_path) -> None:
    """PATH holds only a folder without git (nothing else these commands run is looked up)."""
    empty = tmp_path / "no-git-here"
    empty.mkdir(exist_ok=True)
    monkeypatch.setenv("PATH", str(empty))


# Every command that needs git, run with git gone from PATH: one line that says to install it,
# and nothing written or changed (the project keeps its commit and clean tree).
@pytest.mark.parametrize(
    "command",
    ["update", "update --check", "update --set amp=true", "update --template BUNDLE",
     "new --template BUNDLE", "new --template REPO --vcs-ref HEAD"],
)  # fmt: skip
def test_without_git_every_command_that_needs_it_says_so_in_one_line(
    tmp_path, template_repo, monkeypatch, command
):
    project = new_project(tmp_path, template_repo)
    bundle = tmp_path / "template.bundle"
    git(template_repo, "bundle", "create", str(bundle), "--all")
    before = state(project)
    words = command.replace("BUNDLE", str(bundle)).replace("REPO", str(template_repo)).split()
    target = tmp_path / "other"
    args = [words[0], str(project if words[0] == "update" else target), *words[1:]]
    without_git(monkeypatch, tmp_path)
    result = runner.invoke(cli.app, [*args, "-y", "--no-smoke"] if words[0] == "new" else args)
    assert result.exit_code in (1, 2), result.output
    [line] = result.output.splitlines()
    assert line.startswith("error: ") and "install git first" in line, line
    monkeypatch.undo()
    assert state(project) == before
    assert not target.exists()


HOLD_LOCK = """
import fcntl, sys, time
lock = open(sys.argv[1], "a")
fcntl.flock(lock, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("args", [[], ["--set", "amp=true"]])
def test_a_second_update_while_one_runs_is_refused_and_changes_nothing(
    tmp_path, template_repo, args
):
    # Another process holds the update lock, as a running update does: this one is refused in
    # one line and touches nothing; once that process is gone, the update runs.
    project = new_project(tmp_path, template_repo)
    release_version_b(template_repo)
    before = state(project)
    lock = project / ".git" / "scaffold-update.lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(lock)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline() == "held\n"
        result = update(project, *args)
        one_line_error(result, 1, f"another scaffold update is running in {project}; wait")
        assert state(project) == before
    finally:
        holder.kill()
        holder.wait()
    result = update(project, *args)
    assert result.exit_code == 0, result.output
    assert git(project, "rev-parse", "HEAD") == before[0]  # updated, left for the user to commit
    assert git(project, "status", "--porcelain") != ""


def test_remote_hash_that_is_no_tip_is_left_to_the_update(tmp_path, template_repo):
    first = git(template_repo, "rev-parse", "HEAD")
    release_version_b(template_repo)
    url = f"file://{template_repo}"
    project = new_project(tmp_path, template_repo)
    # ls-remote lists tips only: an older hash on a remote is neither found nor refused.
    check = update(project, "--check", "--template", url, "--to", first[:10])
    assert check.exit_code == 0, check.output
    assert check.output.strip() == f"on template {answers(project)['_commit']}; whether " + (
        f"{first[:10]} is newer shows on update"
    )


@pytest.mark.parametrize(
    "sets, message",
    [
        (["max_grad_norm=0.5"], "--set max_grad_norm applies only with clip=true"),
        (["plateau_patience=3"], "--set plateau_patience applies only with scheduler=plateau"),
        (["patience=9"], "--set patience applies only with early_stopping=true"),
        (["clip=true", "max_grad_norm=nan"], "--set max_grad_norm=nan: "),
        (["clip=true", "max_grad_norm=-1"], "--set max_grad_norm=-1.0: "),
        (["seed=-1"], "--set seed=-1: must be between 0 and"),
    ],
)
def test_set_values_are_checked_like_new_and_change_nothing(tmp_path, template_repo, sets, message):
    project = new_project(tmp_path, template_repo)
    before = state(project)
    result = update(project, *[arg for value in sets for arg in ("--set", value)])
    one_line_error(result, 2, message)
    assert state(project) == before


def test_set_a_follow_up_with_its_switch(tmp_path, template_repo):
    project = new_project(tmp_path, template_repo)
    result = update(project, "--set", "clip=true", "--set", "max_grad_norm=0.25")
    assert result.exit_code == 0, result.output
    assert (answers(project)["clip"], answers(project)["max_grad_norm"]) == (True, 0.25)


@pytest.mark.parametrize(
    "line, value, message",
    [
        ("amp", "maybe", "amp=maybe: must be of type bool"),
        ("seed", "[1]", "seed=[1]: must be of type int"),
        ("task", "poetry", "task=poetry: must be one of classification, regression"),
    ],
)
def test_bad_recorded_answer_is_blamed_on_the_file(tmp_path, template_repo, line, value, message):
    project = new_project(tmp_path, template_repo)
    path = project / ".copier-answers.yml"
    text = path.read_text()
    old = next(row for row in text.splitlines() if row.startswith(f"{line}: "))
    path.write_text(text.replace(old, f"{line}: {value}"))
    commit_all(project, "a hand edit")
    before = state(project)
    result = update(project)
    one_line_error(result, 2, ".copier-answers.yml records a bad answer: ", message)
    assert result.output.strip().endswith(f"fix it, or pass --set {line}=VALUE")
    assert state(project) == before
