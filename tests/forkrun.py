"""Runs edited copies of generated projects in forked children of one process that imported torch
once: the mutation and equivalents suites' runner.

Most of what one mutant used to cost was two fresh interpreters (an import check, then pytest),
each importing torch, numpy and pytest again: about 8 of its 11 seconds on a table project.
Here a server process imports them once and forks a child per job; the child shares the
imported modules copy-on-write, imports the edited project itself (never the server), runs what
the job asks and exits. A job is one of:

- `tests`: import the package's train and overfit modules (a mutant that does not import is
  reported as such), then run pytest on the given test files in the child. With `rule`, the
  tests whose source names the rule run first and the run stops at the first failure that
  names it; with `stop_at_first`, at the first failure of any kind.
- `script`: run a Python source with `sys.argv` set and return its last line of output.
- `python`: what `python -m MODULE ARGS` or `python -c SOURCE ARGS` would do in the job's
  folder, with its stdout, stderr and exit code (`run_python`, for the proof tier's wider
  renders: their import check and three-epoch run).

`Server` starts one such process and sends it jobs; `ServerPool` keeps one per thread of a
runner. `python -m tests.forkrun` is the server's entry point; nothing else calls it.
"""

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

# What a generated project's loop tests import. Each is imported in the server, once; a missing
# optional one is left to the child, where the project's own import reports it.
PRELOAD = (
    "torch",
    # Imported by the first optimizer a run builds (torch wraps add_param_group to keep the
    # compiler out of it, and that wrapper imports torch._dynamo) and by
    # torch.use_deterministic_algorithms (torch._inductor.config): 1.2 s in every child that
    # trains, more than the rest of a mutant's run, when left to the child.
    "torch._dynamo",
    "torch._inductor.config",
    "numpy",
    "pytest",
    "_pytest.junitxml",
    "pyarrow",
    "pyarrow.csv",
    "pyarrow.parquet",
    "PIL.Image",
    "tqdm",
    "tomllib",
)
REPO = Path(__file__).resolve().parent.parent
RULE_TAG = re.compile(r"\b([RSCDTMEK]\d{1,2})(?=[:/,])")


class Picker:
    """A pytest plugin: tests that name `rule` first, and a stop at the first failure that
    counts (one naming the rule, or any with stop_at_first)."""

    def __init__(self, rule: str | None, stop_at_first: bool):
        self.rule = rule
        self.stop_at_first = stop_at_first
        self.failures: dict[str, str] = {}
        self.session = None

    def pytest_sessionstart(self, session):
        self.session = session

    def names_rule(self, item) -> bool:
        import inspect

        try:
            source = inspect.getsource(item.function)
        except (OSError, TypeError, AttributeError):
            return False
        return self.rule in RULE_TAG.findall(source)

    def pytest_collection_modifyitems(self, session, config, items):
        if self.rule:
            # A stable sort: the order within each group is the files' own, so module-scoped
            # fixtures are built once in the usual case (every catching test in the first group).
            # Within a group, runs under float16 last: on the CPU fp16 is emulated, and a
            # recorded image or text run takes 10-20 s in it against 1-2 s in bf16; only the
            # GradScaler's own mutants need it, and they still reach it.
            items.sort(key=lambda item: (not self.names_rule(item), _in_float16(item)))

    def pytest_runtest_logreport(self, report):
        if not report.failed:
            return
        name = report.nodeid.rsplit("::", 1)[-1]
        crash = getattr(report.longrepr, "reprcrash", None)
        message = crash.message if crash is not None else str(report.longrepr)
        if report.when != "call":  # the message JUnit XML gives an error in a fixture
            message = f'failed on {report.when} with "{message}"'
        self.failures.setdefault(name, message)
        if self.stop_at_first or (self.rule and self.rule in RULE_TAG.findall(message)):
            # shouldfail, as -x sets it: pytest exits 1 (tests failed), where shouldstop
            # would make it 2 (interrupted).
            self.session.shouldfail = f"stopped at {name}: it decides the outcome"


def _in_float16(item) -> bool:
    callspec = getattr(item, "callspec", None)
    values = callspec.params.values() if callspec is not None else ()
    return any(isinstance(v, str) and v == "float16" for v in values)


def _python(job: dict) -> dict:
    """Run job["argv"] (`-m MODULE ...` or `-c SOURCE ...`) as the interpreter would: the
    folder first on sys.path (this repository's place there left out, as a project never has
    it), the job's paths after it as PYTHONPATH puts them, and SystemExit as the exit code."""
    import runpy

    cwd = str(Path.cwd())
    others = [p for p in sys.path if p and Path(p).resolve() != REPO]
    sys.path[:] = [cwd, *(str(Path(cwd) / p) for p in job.get("sys_path", [])), *others]
    kind, target, *args = job["argv"]
    code = 0
    try:
        if kind == "-m":
            sys.argv = [target, *args]  # run_module puts the module's file in argv[0]
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        elif kind == "-c":
            sys.argv = ["-c", *args]
            exec(compile(target, "<string>", "exec"), {"__name__": "__main__"})
        else:
            raise ValueError(f"python jobs take -m or -c, not {kind!r}")
    except SystemExit as done:
        if done.code is None or isinstance(done.code, int):
            code = done.code or 0
        else:  # sys.exit("message"): printed, status 1, as the interpreter does
            print(done.code, file=sys.stderr)
            code = 1
    except BaseException:  # noqa: BLE001 - an uncaught exception: traceback, status 1
        traceback.print_exc()
        code = 1
    return {"returncode": code}


def _child(job: dict) -> dict:
    """What a forked child does with a job; its return value is the job's result."""
    os.chdir(job["cwd"])
    os.environ.update(job.get("env", {}))
    if job["kind"] == "python":
        return _python(job)
    for path in reversed(job.get("sys_path", [])):
        sys.path.insert(0, str(Path(job["cwd"]) / path))
    if job["kind"] == "script":
        sys.argv = ["-c", *job.get("argv", [])]
        exec(compile(job["source"], "<job>", "exec"), {"__name__": "__main__"})
        return {"ok": True}
    import importlib

    try:
        for module in job.get("imports", []):
            importlib.import_module(module)
    except BaseException:  # noqa: BLE001 - a mutant may break its module in any way
        return {"imports": False, "detail": traceback.format_exc()[-500:]}
    import pytest

    picker = Picker(job.get("rule"), job.get("stop_at_first", False))
    # Every test of the files named, in either of the project's tiers (its addopts leave the
    # probes out).
    args = ["-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-m", "probe or not probe"]
    args += job["tests"]
    returncode = int(pytest.main(args, plugins=[picker]))
    return {
        "imports": True,
        "returncode": returncode,
        "failures": picker.failures,
    }


def _run_forked(job: dict) -> dict:
    """Fork, run the job in the child with its output in job['log'], wait (or kill at the
    timeout), and read back what it returned."""
    result_path = Path(job["log"]).with_suffix(".result.json")
    result_path.unlink(missing_ok=True)
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the server's loop
        status = 1
        try:
            with open(job["log"], "w") as log, open(job.get("stderr_log", os.devnull), "w") as err:
                os.dup2(log.fileno(), 1)
                os.dup2((err if "stderr_log" in job else log).fileno(), 2)
                sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
                sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
                os.setpgid(0, 0)  # its own group: a timeout kills what it launched too
                try:
                    result = _child(job)
                except BaseException:  # noqa: BLE001 - reported, not raised
                    result = {"crashed": traceback.format_exc()[-1500:]}
                sys.stdout.flush()
                sys.stderr.flush()
                result_path.write_text(json.dumps(result))
                status = 0
        finally:
            os._exit(status)
    deadline = started + job.get("timeout", 600)
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
            return {"timed_out": True, "seconds": time.monotonic() - started}
        time.sleep(0.02)
    try:
        result = json.loads(result_path.read_text())
    except (OSError, ValueError):
        result = {"crashed": f"the child ended with status {status} and no result"}
    result["seconds"] = time.monotonic() - started
    try:
        result["output"] = Path(job["log"]).read_text(errors="replace")
        if "stderr_log" in job:
            result["stderr"] = Path(job["stderr_log"]).read_text(errors="replace")
    except OSError:
        result["output"] = ""
    if job["kind"] != "python":  # the others need only its end
        result["output"] = result["output"][-4000:]
    return result


def serve() -> None:
    """The server: preload, then one JSON job a line on stdin, one JSON result a line on stdout."""
    import importlib

    for module in PRELOAD:
        try:
            importlib.import_module(module)
        except ImportError:
            pass
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    # Nothing the server or a child prints may reach the protocol's pipe.
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    print("ready", file=protocol, flush=True)
    for line in sys.stdin:
        job = json.loads(line)
        try:
            result = _run_forked(job)
        except Exception:  # noqa: BLE001 - the server keeps serving
            result = {"crashed": traceback.format_exc()[-1500:]}
        print(json.dumps(result), file=protocol, flush=True)


class Server:
    """One server process; `run(job)` sends a job and waits for its result (one at a time)."""

    def __init__(self, env: dict | None = None):
        self.env = {**os.environ, "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg", **(env or {})}
        self.process = None
        self.lock = threading.Lock()

    def _start(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.forkrun"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=self.env,
            cwd=Path(__file__).resolve().parent.parent,
        )  # fmt: skip
        if self.process.stdout.readline().strip() != "ready":
            raise RuntimeError("the fork server did not start")

    def run(self, job: dict) -> dict:
        with self.lock:
            if self.process is None or self.process.poll() is not None:
                self._start()
            self.process.stdin.write(json.dumps(job) + "\n")
            self.process.stdin.flush()
            line = self.process.stdout.readline()
            if not line:
                self.process = None
                return {"crashed": "the fork server ended"}
            return json.loads(line)

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.stdin.close()
            self.process.wait(timeout=30)
        self.process = None


class ServerPool:
    """One server per thread that asks, made on first use and closed together."""

    def __init__(self):
        self.local = threading.local()
        self.servers: list[Server] = []
        self.lock = threading.Lock()

    def run(self, job: dict) -> dict:
        server = getattr(self.local, "server", None)
        if server is None:
            server = self.local.server = Server()
            with self.lock:
                self.servers.append(server)
        return server.run(job)

    def close(self) -> None:
        for server in self.servers:
            server.close()


POOL = ServerPool()  # the process's servers: a pytest worker or a table run keeps them all along


def run_python(
    argv: list[str], cwd: Path, env: dict | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """`python ARGV` in `cwd` with the project's src on the path, forked from a server that
    imported torch, numpy, pytest and the rest once: the same outcome as a fresh interpreter's
    run, less the two seconds of its imports. One thing a fork cannot show is a module that
    uses a submodule PRELOAD imported without importing it itself: the generated suites, whose
    tests and child processes run in fresh interpreters, do."""
    with tempfile.TemporaryDirectory(prefix="forkrun-") as logs:
        result = POOL.run(
            {"kind": "python", "cwd": str(cwd), "env": env or {}, "sys_path": ["src"],
             "argv": argv, "log": f"{logs}/stdout", "stderr_log": f"{logs}/stderr",
             "timeout": timeout}
        )  # fmt: skip
    command = [sys.executable, *argv]
    if result.get("timed_out"):
        raise subprocess.TimeoutExpired(command, timeout)
    if "crashed" in result:
        raise RuntimeError(f"the forked run of {argv[:2]} crashed: {result['crashed']}")
    return subprocess.CompletedProcess(
        command, result["returncode"], result["output"], result.get("stderr", "")
    )


if __name__ == "__main__":
    serve()
