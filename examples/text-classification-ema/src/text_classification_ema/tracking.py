"""MLflow tracking of a training run (the setting tracking = "mlflow").

An MLflow run follows the training run: every setting as a parameter, each epoch's row of
metrics.csv as metrics (the epoch is the step), the template's version and options as tags,
and at the end the run's files. A resumed training run continues the same MLflow run, whose id
its checkpoints keep.

mlflow is an extra (pip install -e ".[mlflow]"): this module imports it only when a run asks
for tracking. MLflow's client is used (not its global `mlflow.start_run` state), so nothing
here touches other code's MLflow runs.
"""

import dataclasses
import logging
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from . import TEMPLATE_OPTIONS, TEMPLATE_VERSION
from .config import Config, ConfigError, dump_config

# The experiment that runs go to unless MLFLOW_EXPERIMENT_NAME names another: this project's.
EXPERIMENT = "text-classification-ema"
# The default store, beside the run folders (in --out's parent): a SQLite file for the runs,
# their parameters and metrics, and a folder for their files.
STORE_FILE = "mlflow.db"
ARTIFACTS_FOLDER = "mlartifacts"
HEALTH_TIMEOUT_S = 10.0  # a server that has not answered /health by then is not there
# MLflow's client retries a failing request 7 times over minutes; a training run waits for it.
# Fewer, shorter tries (unless set in the environment) bound what an outage costs a run, once.
HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_TIMEOUT": "20"}
# MLflow's limits per log_batch call: 1000 metrics, 100 parameters or tags.
METRICS_PER_CALL, PARAMS_PER_CALL = 1000, 100
# The stores these packages serve (everything but a tracking server needs SQLAlchemy).
SERVER_SCHEMES = ("http", "https", "databricks")
INSTALL = 'pip install -e ".[mlflow]"'


def store_uri(out: Path) -> str:
    """MLFLOW_TRACKING_URI when it is set (a team's server, say), else the SQLite file in the
    parent folder of --out, which every run beside this one shares."""
    return os.environ.get("MLFLOW_TRACKING_URI") or default_store(out)


def default_store(out: Path) -> str:
    return "sqlite:///" + (Path(out).resolve().parent / STORE_FILE).as_posix()


def shown(uri: str) -> str:
    """The URI without a password in it, for messages."""
    parts = urllib.parse.urlsplit(uri)
    if parts.password is None:
        return uri
    netloc = parts.netloc.rsplit("@", 1)[1]
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{parts.username}:***@{netloc}"))


def first_line(err: BaseException) -> str:
    """An error as one short line: its first line, cut at 200 characters."""
    lines = str(err).strip().splitlines() or [type(err).__name__]
    return lines[0] if len(lines[0]) <= 200 else lines[0][:197] + "..."


def missing_extra(err: ImportError) -> ConfigError:
    what = f" ({err.name.split('.')[0]} is missing)" if err.name else ""
    return ConfigError(
        f'tracking = "mlflow" needs the mlflow extra{what}: {INSTALL} (or set tracking=none)'
    )


@dataclasses.dataclass
class Store:
    """An MLflow tracking store that answers, and the client that talks to it."""

    client: object  # mlflow.tracking.MlflowClient
    uri: str
    default: bool  # the SQLite file beside the runs, rather than MLFLOW_TRACKING_URI's


def connect(out: Path) -> Store:
    """Import MLflow and open its store (a server: check that it answers), before anything
    trains. A missing package and a store that cannot be used are each one ConfigError line.
    """
    uri = store_uri(out)
    scheme = urllib.parse.urlsplit(uri).scheme
    try:
        from mlflow.tracking import MlflowClient

        if scheme not in SERVER_SCHEMES:  # a database store: MLflow opens it with these
            import alembic  # noqa: F401
            import sqlalchemy  # noqa: F401
    except ImportError as err:
        raise missing_extra(err) from None
    # MLflow logs its database set-up at INFO; a run's output stays its own lines.
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    if scheme in ("http", "https"):
        check_server(uri)
        for name, value in HTTP_DEFAULTS.items():
            os.environ.setdefault(name, value)
    try:
        client = MlflowClient(tracking_uri=uri)  # a database store is opened (or made) here
    except Exception as err:  # MLflow's, SQLAlchemy's or the OS's: the store is unusable
        raise ConfigError(
            f"MLflow cannot open the store {shown(uri)} ({first_line(err)}); repair or move it, "
            "correct MLFLOW_TRACKING_URI, or set tracking=none"
        ) from None
    return Store(client, uri, default=uri == default_store(out))


def check_server(uri: str) -> None:
    """Raise ConfigError unless the tracking server at `uri` answers its /health page."""
    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=HEALTH_TIMEOUT_S):
            pass
    except urllib.error.HTTPError:
        return  # it answered (a login page, a proxy's 404): the client's requests tell the rest
    except (OSError, ValueError) as err:  # refused, unknown host, timed out, a malformed URI
        reason = getattr(err, "reason", err)
        raise ConfigError(
            f"the MLflow server at {shown(uri)} does not answer ({reason}); start it, correct "
            "MLFLOW_TRACKING_URI, or set tracking=none"
        ) from None


def start_run(store: Store, cfg: Config, checkpoint: dict | None) -> "Tracker":
    """The MLflow run of this training run: the checkpoint's, continued, or a new one.

    A resumed run whose MLflow run is gone from the store (another store, or deleted), or
    that was not tracked before, gets a new MLflow run tagged as a resume, with the epochs the
    checkpoint holds logged first. Any MLflow failure here is a ConfigError line: nothing has
    trained yet, so the run stops rather than train untracked by surprise.
    """
    earlier = checkpoint.get("mlflow_run_id", "") if checkpoint is not None else ""
    try:
        run = find_run(store.client, earlier) if earlier else None
        if run is not None:
            store.client.update_run(run.info.run_id, status="RUNNING")
        else:
            run = new_run(store, cfg, earlier)
        tracker = Tracker(store.client, run.info.run_id, cfg)
        if checkpoint is not None:
            tracker.resume(checkpoint)
        experiment = store.client.get_experiment(run.info.experiment_id).name
    except Exception as err:  # MLflow's, SQLAlchemy's, the network's: from the store's side
        raise ConfigError(
            f"MLflow failed at {shown(store.uri)} ({first_line(err)}); set tracking=none to "
            "train without it"
        ) from None
    line = f'MLflow: run {tracker.run_id} in experiment "{experiment}" at {shown(store.uri)}'
    if checkpoint is not None and tracker.run_id == earlier:
        line += f", continued after epoch {checkpoint['epoch']}"
    elif earlier:
        line += f", new: run {earlier} of the resumed epochs is not in this store"
    elif checkpoint is not None:
        line += ", new: the resumed epochs were not tracked"
    print(line, flush=True)
    return tracker


def find_run(client, run_id: str):
    """The MLflow run with this id, or None when the store has none (or only a deleted one)."""
    from mlflow.exceptions import MlflowException

    try:
        run = client.get_run(run_id)
    except MlflowException as err:
        if err.error_code == "RESOURCE_DOES_NOT_EXIST":
            return None
        raise
    return None if run.info.lifecycle_stage == "deleted" else run


def new_run(store: Store, cfg: Config, earlier: str):
    """A new MLflow run in the experiment, made if it does not exist, with its tags and every
    setting as a parameter."""
    from mlflow.entities import Param
    from mlflow.exceptions import MlflowException

    name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or EXPERIMENT
    experiment = store.client.get_experiment_by_name(name)
    if experiment is None:
        # The default store keeps the files beside the runs; a server (or a store named by
        # MLFLOW_TRACKING_URI) puts them where it is set up to.
        location = None
        if store.default:
            location = (Path(cfg.out).resolve().parent / ARTIFACTS_FOLDER).as_uri()
        try:
            experiment_id = store.client.create_experiment(name, artifact_location=location)
        except MlflowException as err:
            if err.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
            experiment_id = store.client.get_experiment_by_name(name).experiment_id  # a run beside
    else:
        experiment_id = experiment.experiment_id
    tags = {"scaffold.template_version": TEMPLATE_VERSION}
    tags.update({f"scaffold.option.{key}": str(value) for key, value in TEMPLATE_OPTIONS.items()})
    if earlier:  # a resume whose MLflow run is gone
        tags["scaffold.earlier_mlflow_run"] = earlier
    run = store.client.create_run(experiment_id, tags=tags, run_name=Path(cfg.out).name)
    params = [Param(key, str(value)) for key, value in dataclasses.asdict(cfg).items()]
    for start in range(0, len(params), PARAMS_PER_CALL):
        store.client.log_batch(run.info.run_id, params=params[start : start + PARAMS_PER_CALL])
    return run


class Tracker:
    """Sends a run's epochs and files to its MLflow run; never stops the training run.

    After an MLflow failure it says so in one line and sends nothing more: the checkpoints
    keep the MLflow run's id, and a resume later logs the epochs it missed.
    """

    def __init__(self, client, run_id: str, cfg: Config) -> None:
        self.client, self.run_id, self.cfg = client, run_id, cfg
        self.logged_epoch = 0  # the last epoch whose metrics the MLflow run has
        self.working = True

    def resume(self, checkpoint: dict) -> None:
        """Tag the run as resumed, with the settings that changed, and log the epochs of the
        checkpoint that the MLflow run lacks (all of them in a new MLflow run)."""
        from mlflow.entities import Param

        history = self.client.get_metric_history(self.run_id, "val_loss")
        self.logged_epoch = max((metric.step for metric in history), default=0)
        # MLflow's parameters cannot change: the ones a resume changes go in a tag, and the
        # settings the run did not have yet (a newer template's) become parameters.
        saved, settings = checkpoint["config"], dataclasses.asdict(self.cfg)
        changed = [key for key, value in settings.items() if key in saved and saved[key] != value]
        what = ", ".join(f"{key} {saved[key]} -> {settings[key]}" for key in changed)
        self.client.set_tag(
            self.run_id,
            f"scaffold.resumed_after_epoch_{checkpoint['epoch']}",
            what or "no setting changed",
        )
        logged = self.client.get_run(self.run_id).data.params
        new = [Param(key, str(value)) for key, value in settings.items() if key not in logged]
        for start in range(0, len(new), PARAMS_PER_CALL):
            self.client.log_batch(self.run_id, params=new[start : start + PARAMS_PER_CALL])
        self.send(checkpoint["history"])

    def log_epochs(self, history: list[dict]) -> None:
        """Send the rows of `history` the MLflow run lacks; called once last.pt holds them, so
        a run killed in between leaves MLflow behind its checkpoint, never ahead of it."""
        if self.working:
            self.safely(
                lambda: self.send(history),
                f"at epoch {history[-1]['epoch']}",
                "training goes on untracked, and a resume of this run logs the epochs it missed",
            )

    def send(self, history: list[dict]) -> None:
        from mlflow.entities import Metric

        timestamp = int(time.time() * 1000)
        metrics = [
            Metric(key, float(value), timestamp, row["epoch"])
            for row in history
            if row["epoch"] > self.logged_epoch
            for key, value in row.items()
            if key != "epoch"  # the step
        ]
        for start in range(0, len(metrics), METRICS_PER_CALL):
            self.client.log_batch(self.run_id, metrics=metrics[start : start + METRICS_PER_CALL])
        if history:
            self.logged_epoch = max(self.logged_epoch, history[-1]["epoch"])

    def end(self, status: str = "FINISHED") -> None:
        """Send the run's files and end the MLflow run with `status`: FINISHED, or KILLED or
        FAILED for a run that stopped. The files: metrics.csv, config.toml (the settings),
        best.pt, and curves.png, which only a finished run draws. For a stopped run this is
        best effort: a second Ctrl-C skips it."""
        if not self.working:
            return
        self.working = False
        out = Path(self.cfg.out)
        names = ["metrics.csv", "best.pt"] + (["curves.png"] if status == "FINISHED" else [])

        def send_files() -> None:
            self.client.log_text(self.run_id, dump_config(self.cfg), "config.toml")
            for name in names:
                if (out / name).is_file():
                    self.client.log_artifact(self.run_id, str(out / name))
            self.client.set_terminated(self.run_id, status=status)

        try:
            self.safely(send_files, "as the run ended", "its MLflow run may lack some files")
        except KeyboardInterrupt:
            if status == "FINISHED":
                raise

    def safely(self, action, where: str, then: str) -> None:
        """Run `action`; an MLflow failure (any error but Ctrl-C) is one warning line saying
        what happens `then`, and nothing more is sent."""
        try:
            action()
        except Exception as err:  # the store, the network, the disk: MLflow raises them all
            self.working = False
            print(f"warning: MLflow failed {where} ({first_line(err)}); {then}", file=sys.stderr)
