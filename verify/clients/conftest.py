"""Shared fixtures: one local 3-replica logless cluster per pytest session, and one more with
a password (`logless up --requirepass`) for the tests that ask for `secured`.

The cluster is started with `logless up` on free loopback ports (probed by binding, never
fixed), in a temporary data directory, and stopped with SIGTERM (SIGKILL after 10 s) when the
session ends. Every test shares it, so tests use unique keys (see the `ns` fixture).

Environment:
  LOGLESS_BIN            the logless binary (default: <repo>/target/release/logless)
  LOGLESS_CLIENT_ENGINE  the clusters' engine, rmw (default) or multipaxos
  LOGLESS_CLIENT_KEEP=1  keep the data directory (and replica logs) even when everything passed

A test whose expectations hold under one engine only is marked
`@pytest.mark.engine("rmw", reason="...")`: under the other engine it is skipped with that
reason, which `-ra` prints in the summary.
"""
from __future__ import annotations

import os
import random
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
REPLICAS = 3
PEER_OFFSET = 1000
HTTP_OFFSET = 2000
READY_TIMEOUT_S = 30
STOP_GRACE_S = 10
HOST = "127.0.0.1"
# The password of the `secured` cluster.
PASSWORD = "client-tests-pass"
ENGINE = os.environ.get("LOGLESS_CLIENT_ENGINE") or "rmw"
ENGINES = ("rmw", "multipaxos")


def pytest_configure(config):
    if ENGINE not in ENGINES:
        raise pytest.UsageError(
            f"LOGLESS_CLIENT_ENGINE must be one of {', '.join(ENGINES)}, not {ENGINE!r}")
    config.addinivalue_line(
        "markers", "engine(*names, reason): expectations that hold under these engines only")


def pytest_report_header(config):
    return f"logless engine: {ENGINE}"


def pytest_runtest_setup(item):
    for mark in item.iter_markers(name="engine"):
        unknown = set(mark.args) - set(ENGINES)
        reason = mark.kwargs.get("reason")
        if unknown or not mark.args or not reason:
            raise pytest.UsageError(
                f"{item.nodeid}: engine marks name engines of {ENGINES} and give a reason")
        if ENGINE not in mark.args:
            pytest.skip(f"not under the {ENGINE} engine: {reason}")


def logless_bin() -> Path:
    path = Path(os.environ.get("LOGLESS_BIN") or REPO / "target" / "release" / "logless")
    if not path.is_absolute():
        path = REPO / path
    return path


def _port_free(port: int) -> bool:
    # No SO_REUSEADDR: a port with lingering TIME_WAIT sockets counts as busy, which is the
    # conservative answer.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def pick_base_port(replicas: int = REPLICAS) -> int:
    """A base port P such that P.., P+1000.. and P+2000.. (`replicas` of each) are all free on
    loopback.

    P is drawn below the usual ephemeral range (32768+), so outgoing connections are
    unlikely to take one of the ports between the probe and the bind."""
    rng = random.Random()
    for _ in range(500):
        base = rng.randrange(10000, 30000)
        ports = [base + off + i for off in (0, PEER_OFFSET, HTTP_OFFSET) for i in range(replicas)]
        if all(_port_free(p) for p in ports):
            return base
    raise RuntimeError(f"no free base port found for a {replicas}-replica cluster")


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def log_tails(data_dir: Path, lines: int = 40, replicas: int = REPLICAS) -> str:
    out = []
    for name in ["up.log"] + [f"node-{i + 1}.log" for i in range(replicas)]:
        path = data_dir / name
        try:
            text = path.read_text(errors="replace").splitlines()
        except OSError as e:
            out.append(f"--- {path}: {e.strerror}")
            continue
        out.append(f"--- {path} (last {lines} lines)")
        out.extend(_ANSI.sub("", line) for line in text[-lines:])
    return "\n".join(out)


@dataclass
class Cluster:
    base_port: int
    data_dir: Path
    process: subprocess.Popen
    addresses: list = field(default_factory=list)

    @property
    def ports(self) -> list[int]:
        return [port for _, port in self.addresses]

    def alive(self) -> bool:
        return self.process.poll() is None

    def tails(self) -> str:
        return log_tails(self.data_dir, replicas=len(self.addresses))


def _start(data_dir: Path, password: str | None = None,
           extra_args: tuple[str, ...] = (), replicas: int = REPLICAS) -> Cluster:
    """Starts `logless up` with `replicas` nodes (with `extra_args`, and `password` in its
    environment) in `data_dir` and waits until it serves."""
    binary = logless_bin()
    if not os.access(binary, os.X_OK):
        pytest.exit(f"logless binary not found or not executable: {binary} (set LOGLESS_BIN)", 2)
    last_error = ""
    for attempt in range(3):
        base = pick_base_port(replicas)
        run_dir = data_dir / f"run-{attempt}"
        run_dir.mkdir(parents=True)
        up_log = open(run_dir / "up.log", "wb")
        process = subprocess.Popen(
            [str(binary), "up", "--port", str(base), "--dir", str(run_dir),
             "--replicas", str(replicas), "--ready-timeout-s", str(READY_TIMEOUT_S),
             "--engine", ENGINE, *extra_args],
            stdin=subprocess.DEVNULL, stdout=up_log, stderr=subprocess.STDOUT,
            # The password in the environment, not on the command line.
            env=_environment(password),
            # Its own process group, so a SIGKILL fallback also reaches the replicas.
            start_new_session=True,
        )
        up_log.close()
        cluster = Cluster(base, run_dir, process, [(HOST, base + i) for i in range(replicas)])
        deadline = time.monotonic() + READY_TIMEOUT_S + 5
        while time.monotonic() < deadline:
            text = (run_dir / "up.log").read_text(errors="replace")
            if "serving" in text:
                return cluster
            if process.poll() is not None:
                break
            time.sleep(0.1)
        last_error = (f"`logless up --port {base}` did not become ready "
                      f"(exit status {process.poll()})\n{cluster.tails()}")
        _stop(cluster)
        # A port taken between the probe and the bind: try other ports.
        if "in use" not in last_error.lower():
            break
    # Stop the session: every test needs the cluster, and pytest would retry the fixture
    # for each of them.
    pytest.exit(f"cannot start the cluster: {last_error}", returncode=3)


def _environment(password: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "LOGLESS_REQUIREPASS"}
    if password:
        env["LOGLESS_REQUIREPASS"] = password
    return env


def _stop(cluster: Cluster) -> int | None:
    process = cluster.process
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()
    # Replicas left behind by a killed `logless up` share its process group.
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    return process.returncode


_FAILURES_KEY = pytest.StashKey[int]()
_TAILS_KEY = pytest.StashKey[str]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed and not hasattr(report, "wasxfail"):
        config = item.config
        config.stash[_FAILURES_KEY] = config.stash.get(_FAILURES_KEY, 0) + 1


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    tails = config.stash.get(_TAILS_KEY, "")
    if tails:
        terminalreporter.section("logless replica logs")
        terminalreporter.write_line(tails)


@pytest.fixture(scope="session")
def cluster(request):
    """The running cluster; `cluster.addresses` is [(host, port)] of the three replicas."""
    yield from _session_cluster(request, None)


@pytest.fixture(scope="session")
def secured(request):
    """A cluster whose clients must log in with `PASSWORD`."""
    yield from _session_cluster(request, PASSWORD)


def _session_cluster(request, password: str | None):
    data_dir = Path(tempfile.mkdtemp(prefix="logless-clients-"))
    cluster = _start(data_dir, password)
    yield cluster
    exited_early = cluster.process.poll()
    status = _stop(cluster)
    failures = request.config.stash.get(_FAILURES_KEY, 0)
    clean_stop = exited_early is None and status == 0
    if failures or not clean_stop or os.environ.get("LOGLESS_CLIENT_KEEP"):
        request.config.stash[_TAILS_KEY] = request.config.stash.get(_TAILS_KEY, "") + (
            f"data directory kept: {cluster.data_dir}\n{cluster.tails()}\n")
    else:
        shutil.rmtree(data_dir, ignore_errors=True)
    assert exited_early is None, (
        f"`logless up` exited (status {exited_early}) while the tests ran: a replica died")
    assert status == 0, f"`logless up` did not stop cleanly on SIGTERM (status {status})"


def own_cluster(request, prefix: str, extra_args: tuple[str, ...], replicas: int = REPLICAS):
    """A module's cluster of its own (`logless up` with `extra_args` and `replicas` nodes):
    yields it, then stops it, keeping its data directory if a test failed."""
    data_dir = Path(tempfile.mkdtemp(prefix=prefix))
    cluster = _start(data_dir, extra_args=extra_args, replicas=replicas)
    yield cluster
    exited_early = cluster.process.poll()
    status = _stop(cluster)
    if request.session.testsfailed or exited_early is not None or status != 0:
        print(f"data directory kept: {cluster.data_dir}\n{cluster.tails()}")
    else:
        shutil.rmtree(data_dir, ignore_errors=True)
    assert exited_early is None, f"`logless up` exited (status {exited_early}) during the tests"
    assert status == 0, f"`logless up` did not stop cleanly on SIGTERM (status {status})"


@pytest.fixture(scope="session")
def addresses(cluster):
    return cluster.addresses


@pytest.fixture
def ns():
    """A unique key prefix for one test (the cluster is shared)."""
    return f"t:{uuid.uuid4().hex}:"
