"""Sweeps: trials are real runs, a sweep repeats, pruning keeps files, a study survives Ctrl-C
and kills, and two workers on one study never run a trial twice.

Each trial is a short training run in a child process: these are probes (pytest -m probe).
"""

import csv
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import task_cases
from image_classification_distributed import tune

optuna = pytest.importorskip("optuna")
pytestmark = pytest.mark.probe

SRC = Path(tune.__file__).parents[1]
# Two settings with ranges wide enough that trials differ, and two epochs a trial.
SPACE = "[space]\nlr = {low = 1e-3, high = 1e-2, log = true}\ndropout = {low = 0.0, high = 0.3}\n"
FIXED = [*task_cases.SMALL, "epochs=2", "device=cpu"]


def env() -> dict:
    paths = os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH", "")]))
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": paths}


def command(folder: Path, *args: str) -> list[str]:
    space = folder / "space.toml"
    space.write_text(SPACE)
    sets = [part for setting in FIXED for part in ("--set", setting)]
    return [sys.executable, "-m", tune.__name__, "--space", str(space), *sets, *args]


def sweep(folder: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        command(folder, *args), cwd=folder, env=env(), capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip


def trials_of(folder: Path, name: str = "sweep", storage: str | None = None) -> list:
    url = storage or f"sqlite:///{folder / 'runs' / 'sweep' / 'study.db'}"
    if url.startswith("journal:"):
        backend = optuna.storages.journal.JournalFileBackend(url.removeprefix("journal:"))
        url = optuna.storages.JournalStorage(backend)
    return optuna.load_study(study_name=name, storage=url).get_trials()


def val_losses(metrics: Path) -> list[float]:
    with open(metrics, newline="") as f:
        return [float(row["val_loss"]) for row in csv.DictReader(f)]


@pytest.fixture(scope="module")
def first_sweep(tmp_path_factory):
    """Two trials with the sampler's seed 0, and what the sweep printed."""
    folder = tmp_path_factory.mktemp("sweep")
    result = sweep(folder, "--trials", "2", "--no-prune", "--seed", "0")
    assert result.returncode == 0, result.stderr
    return folder, result.stdout


def test_a_sweep_runs_real_trials_and_its_best_command_reproduces_the_best(first_sweep):
    folder, printed = first_sweep
    trials = trials_of(folder)
    assert [t.state.name for t in trials] == ["COMPLETE"] * 2
    assert len({t.params["lr"] for t in trials}) == 2  # the sampler chose, not the defaults
    for trial in trials:  # each trial a whole run, its value the best epoch's val_loss
        run = folder / trial.user_attrs["folder"]
        assert (run / "best.pt").is_file() and (run / "last.pt").is_file()
        assert trial.value == min(val_losses(run / "metrics.csv"))
    best = min(trials, key=lambda t: t.value)
    said = printed.strip().splitlines()
    assert said[-2].startswith(f"best: trial {best.number}, val_loss "), said
    reproduce = said[-1].removeprefix("reproduce: ").split()
    assert reproduce[:3] == ["python", "-m", f"{tune.__package__}.train"], said[-1]
    run = subprocess.run(
        [sys.executable, *reproduce[1:]], cwd=folder, env=env(), capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert min(val_losses(folder / "runs" / "best" / "metrics.csv")) == best.value


def test_the_same_seed_repeats_a_sweep_and_another_seed_does_not(first_sweep, tmp_path):
    first = [(t.params, t.value) for t in trials_of(first_sweep[0])]
    outcomes = []
    for name, seed, trials in (("again", "0", "2"), ("other", "1", "1")):
        folder = tmp_path / name
        folder.mkdir()
        result = sweep(folder, "--trials", trials, "--no-prune", "--seed", seed)
        assert result.returncode == 0, result.stderr
        outcomes.append([(t.params, t.value) for t in trials_of(folder)])
    assert outcomes[0] == first
    assert outcomes[1][0][0] != first[0][0]


class PruneAtEpoch:
    """A trial, as run_trial sees it, whose pruner says stop once an epoch is reported."""

    def __init__(self) -> None:
        self.reported, self.attrs = [], {}

    def report(self, value: float, step: int) -> None:
        self.reported.append((step, value))

    def should_prune(self) -> bool:
        return bool(self.reported)

    def set_user_attr(self, key, value) -> None:
        self.attrs[key] = value


def test_a_pruned_trial_stops_early_and_keeps_its_files(tmp_path):
    folder = tmp_path / "trial-0000"
    settings = [part for setting in FIXED for part in ("--set", setting)]
    train = [sys.executable, "-m", f"{tune.__package__}.train", "--out", str(folder), *settings]
    # Enough epochs that the run cannot end between two looks at its metrics.csv (a small
    # epoch takes ~10 ms: 50 of them once ended inside one POLL_S on a busy machine).
    epochs = 20_000
    train += ["--set", f"epochs={epochs}", "--set", "checkpoint_every_s=0"]  # as tune runs trials
    trial = PruneAtEpoch()
    state, value = tune.run_trial(trial, train, folder, "val_loss")
    assert state == "pruned" and trial.reported[0][0] == 1
    kept = val_losses(folder / "metrics.csv")
    # The SIGTERM ends the run within the epoch it reached: an epoch that was validating or
    # saving is finished and kept (C5), so the objective is the last row the run kept.
    assert len(trial.reported) <= len(kept) <= len(trial.reported) + 1 and value == kept[-1]
    assert (folder / "last.pt").is_file()  # the run ended as on SIGTERM: its epochs saved


def wait_for(path: Path, seconds: float = 300) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.2)


@pytest.mark.parametrize("how", ["ctrl-c", "sigkill"])
def test_a_study_goes_on_after_an_interruption_and_reruns_the_cut_trial(tmp_path, how):
    args = ["--trials", "2", "--no-prune", "--set", "epochs=3"]
    assert sweep(tmp_path, "--trials", "1", *args[2:]).returncode == 0  # trial 0, finished
    # Trial 1 gets epochs enough that it cannot end between its first epoch's row and the
    # signal: with 3, a busy machine let it finish first, and the sweep exited 0.
    endless = ["--set", "epochs=100000"]
    endless += ["--set", "patience=100000"]
    child = subprocess.Popen(
        command(tmp_path, *args, *endless), cwd=tmp_path, env=env(),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    wait_for(tmp_path / "runs" / "sweep" / "trial-0001" / "metrics.csv")  # trial 1 is running
    # A terminal's Ctrl-C reaches the whole process group: the sweep and its trial's run.
    os.killpg(child.pid, signal.SIGINT if how == "ctrl-c" else signal.SIGKILL)
    out, err = child.communicate(timeout=120)
    if how == "ctrl-c":
        assert child.returncode == 130
        assert err.strip().splitlines()[-1].startswith("interrupted; trial 1 will run again"), err
    cut = trials_of(tmp_path)[1]
    assert cut.state.name == ("FAIL" if how == "ctrl-c" else "RUNNING")
    result = sweep(tmp_path, *args)
    assert result.returncode == 0, result.stderr
    trials = trials_of(tmp_path)
    finished = [t for t in trials if t.state.name == "COMPLETE"]
    assert len(finished) == 2 and [t.number for t in finished] == [0, 2]
    assert trials[1].state.name == "FAIL"
    retried = [t for t in finished if t.user_attrs.get("retry_of") == 1]
    assert len(retried) == 1 and retried[0].params == cut.params


@pytest.mark.parametrize("storage", ["sqlite", "journal"])
def test_two_workers_on_one_study_never_run_a_trial_twice(tmp_path, storage):
    url = (
        f"sqlite:///{tmp_path / 'shared.db'}" if storage == "sqlite"
        else f"journal:{tmp_path / 'shared.log'}"
    )  # fmt: skip
    workers = []
    for name in ("w1", "w2"):
        (tmp_path / name).mkdir()
        args = ["--trials", "3", "--no-prune", "--storage", url, "--out", str(tmp_path / "runs")]
        workers.append(
            subprocess.Popen(
                command(tmp_path / name, *args),
                cwd=tmp_path / name,
                env=env(),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    for worker in workers:
        out, err = worker.communicate(timeout=600)
        assert worker.returncode == 0, err
    trials = trials_of(tmp_path, storage=url)
    finished = [t for t in trials if t.state.name == "COMPLETE"]
    assert 3 <= len(finished) <= 4  # two workers may each start one when 2 are counted
    numbers = [t.number for t in trials]
    assert len(numbers) == len(set(numbers))
    folders = sorted(p.name for p in (tmp_path / "runs").iterdir() if p.is_dir())
    assert folders == [f"trial-{n:04d}" for n in sorted(numbers)]  # one run per trial
    pids = {t.user_attrs["pid"] for t in finished}
    assert pids == {w.pid for w in workers}  # both took part


def stale_cases():
    """Every set of attrs another worker can see on a running trial (its worker writes host,
    pid, folder and heartbeat one at a time), from a live or a dead worker here or elsewhere,
    young or old, with whether the trial must run again."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    for host in (socket.gethostname(), "another-machine"):
        for pid in (os.getpid(), int(dead.stdout)):
            for age in (0.0, 2 * tune.STALE_S):
                attrs = {"host": host, "pid": pid, "folder": "f", "heartbeat": time.time() - age}
                for n in range(len(attrs) + 1):
                    seen = dict(list(attrs.items())[:n])
                    if n < len(attrs):  # still being set up: only its age tells
                        dead_worker = age > 0
                    elif host == socket.gethostname():  # here: its process tells at once
                        dead_worker = pid != os.getpid()
                    else:  # elsewhere: its heartbeat tells
                        dead_worker = age > 0
                    yield seen, age, dead_worker


def test_a_trial_runs_again_exactly_when_its_worker_is_dead(monkeypatch):
    cases, stale_s = list(stale_cases()), tune.STALE_S
    assert len(cases) == 40
    for seen, age, dead_worker in cases:
        study = optuna.create_study()
        trial = study.ask()
        for key, value in seen.items():
            trial.set_user_attr(key, value)
        # A trial's start cannot be set back in time: a STALE_S of 0 makes any start old.
        monkeypatch.setattr(tune, "STALE_S", 0.0 if age and "heartbeat" not in seen else stale_s)
        tune.retry_stale_trials(study)
        states = [t.state.name for t in study.get_trials()]
        assert states == (["FAIL", "WAITING"] if dead_worker else ["RUNNING"]), (seen, age)


OPEN_AT = """
import sys, time
from pathlib import Path
from image_classification_distributed import tune
start = float(sys.argv[2])
time.sleep(max(0.0, start - time.time()))  # every process opens the database at once
tune.open_storage(sys.argv[1], Path("."))
"""


@pytest.mark.parametrize("round_", range(3))
def test_workers_opening_a_new_database_at_once_all_get_it(tmp_path, round_):
    # Workers started together race to create a new database's tables; the losers' inserts
    # fail. Four processes open one new SQLite file in the same instant, three times over.
    url = f"sqlite:///{tmp_path / 'new.db'}"
    start = str(time.time() + 8.0)  # after every child has imported optuna and torch
    children = [
        subprocess.Popen(
            [sys.executable, "-c", OPEN_AT, url, start],
            cwd=tmp_path,
            env=env(),
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    errors = [child.communicate(timeout=120)[1] for child in children]
    assert [child.returncode for child in children] == [0] * 4, errors


def test_bad_arguments_are_one_line(tmp_path, monkeypatch, capsys):
    cases = [
        (["--trials", "2", "--metric", "val_nothing"], "--metric must be one of val_loss"),
        (["--trials", "2", "--set", "lr=abc"], "lr"),
        (["--trials", "0"], "--trials must be at least 1"),
        (["--trials", "2", "--space", str(tmp_path / "none.toml")], "cannot read the search space"),
    ]
    (tmp_path / "bad.toml").write_text("[space]\nnot_a_setting = {low = 1, high = 2}\n")
    cases.append((["--trials", "2", "--space", str(tmp_path / "bad.toml")], "'not_a_setting'"))
    (tmp_path / "flat.toml").write_text("[space]\nlr = {low = 1e-2, high = 1e-3}\n")
    cases.append((["--trials", "2", "--space", str(tmp_path / "flat.toml")], "low < high"))
    monkeypatch.chdir(tmp_path)
    for args, text in cases:
        assert tune.main(args) == 2, args
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and text in err, (args, err)
    assert not (tmp_path / "runs").exists()  # nothing ran, nothing was written


def test_the_default_search_space_names_settings_and_can_be_sampled():
    space = tune.default_space()
    assert {"lr", "weight_decay", "batch_size", "dropout"} <= set(space)
    tune.check_space(space)
    study = optuna.create_study()
    trial = study.ask()
    chosen = {name: tune.suggest(trial, name, spec) for name, spec in space.items()}
    from image_classification_distributed.config import load_config

    load_config(None, [f"{k}={v}" for k, v in chosen.items()])  # every value a valid setting


def test_without_optuna_the_extra_is_named(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "optuna", None)  # import optuna raises ImportError
    monkeypatch.chdir(tmp_path)
    assert tune.main(["--trials", "1"]) == 2
    assert capsys.readouterr().err == f"sweeps need Optuna: {tune.EXTRA}\n"
