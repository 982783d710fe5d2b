"""TLS with real clients against `logless up --tls`: redis-py with `ssl=True` and redis-cli
with `--tls` (the line `logless up` prints), both with the client certificate `up` makes; a
client without a certificate, one that does not trust the CA and a plain client are refused;
TLS garbage closes only its own connection, and the replica serves on with its keys intact.

The module starts its own cluster (`logless up --tls`, certificates in `DIR/tls/`), separate
from the session's plain one.
"""
from __future__ import annotations

import os
import shlex
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from conftest import HOST, HTTP_OFFSET, _start, _stop

CLI = shutil.which("redis-cli")
TIMEOUT_S = 30
REFUSED = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)
# For clients that must be refused: redis-py retries a failed connection with backoff (10 times
# in 8.x), seconds per refusal that test nothing of the server.
NO_RETRY = Retry(NoBackoff(), 0)


@pytest.fixture(scope="module")
def tls_cluster():
    data_dir = Path(tempfile.mkdtemp(prefix="logless-tls-"))
    cluster = _start(data_dir, extra_args=("--tls",))
    yield cluster
    exited_early = cluster.process.poll()
    status = _stop(cluster)
    if exited_early is None and status == 0 and not os.environ.get("LOGLESS_CLIENT_KEEP"):
        shutil.rmtree(data_dir, ignore_errors=True)
    assert exited_early is None, f"`logless up --tls` exited early:\n{cluster.tails()}"
    assert status == 0, f"`logless up --tls` did not stop cleanly (status {status})"


@pytest.fixture(scope="module")
def tls_dir(tls_cluster) -> Path:
    return tls_cluster.data_dir / "tls"


def tls_client(tls_cluster, tls_dir, i=0, cert=True, ca=True, **kwargs) -> redis.Redis:
    options = dict(ssl=True, ssl_ca_certs=str(tls_dir / "ca.crt") if ca else None)
    if cert:
        options.update(ssl_certfile=str(tls_dir / "client.crt"),
                       ssl_keyfile=str(tls_dir / "client.key"))
    return redis.Redis(host=HOST, port=tls_cluster.ports[i], socket_timeout=10,
                       socket_connect_timeout=5, **options, **kwargs)


def handshake_failures(tls_cluster, i=0) -> int:
    port = tls_cluster.base_port + HTTP_OFFSET + i
    with urllib.request.urlopen(f"http://{HOST}:{port}/metrics", timeout=10) as response:
        body = response.read().decode()
    name = "logless_client_tls_handshake_failures_total "
    return int(next(line for line in body.splitlines() if line.startswith(name)).split()[1])


def connect_line(tls_cluster) -> list[str]:
    """The redis-cli options in the `connect with:` line that `logless up --tls` printed."""
    text = (tls_cluster.data_dir / "up.log").read_text()
    line = next(line for line in text.splitlines() if line.startswith("connect with:"))
    words = shlex.split(line.split(":", 1)[1].split("(")[0])
    assert words[0] == "redis-cli" and words[-2] == "-p", words
    return words[1:-2]


def cli(tls_cluster, i, *args, options=None):
    options = connect_line(tls_cluster) if options is None else options
    return subprocess.run([CLI, *options, "-h", HOST, "-p", str(tls_cluster.ports[i]),
                           *map(str, args)], capture_output=True, timeout=TIMEOUT_S)


@pytest.mark.parametrize("protocol", [2, 3])
def test_redis_py_over_tls_writes_through_one_replica_and_reads_through_the_others(
        tls_cluster, tls_dir, protocol):
    key = f"tls:{uuid.uuid4().hex}"
    with tls_client(tls_cluster, tls_dir, 0, protocol=protocol) as r:
        assert r.ping()
        assert r.set(key, "encrypted") is True
        assert r.incr(key + ":n") == 1
    for i in (1, 2):
        with tls_client(tls_cluster, tls_dir, i, protocol=protocol) as r:
            assert r.get(key) == b"encrypted"
            assert r.get(key + ":n") == b"1"


def test_clients_without_the_certificate_or_the_ca_or_tls_are_refused(tls_cluster, tls_dir):
    before = handshake_failures(tls_cluster)
    with pytest.raises(REFUSED):
        # tls-auth-clients yes
        tls_client(tls_cluster, tls_dir, cert=False, retry=NO_RETRY).ping()
    with pytest.raises(REFUSED):
        # the throwaway CA is not trusted
        tls_client(tls_cluster, tls_dir, ca=False, retry=NO_RETRY).ping()
    with pytest.raises(REFUSED):
        redis.Redis(host=HOST, port=tls_cluster.ports[0], socket_timeout=5, retry=NO_RETRY).ping()
    deadline = time.monotonic() + 10
    while handshake_failures(tls_cluster) < before + 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert handshake_failures(tls_cluster) >= before + 3
    with tls_client(tls_cluster, tls_dir) as r:
        assert r.ping()


def test_redis_cli_with_the_printed_line(tls_cluster, tls_dir):
    if CLI is None:
        pytest.fail("redis-cli not found: install redis-tools", pytrace=False)
    options = connect_line(tls_cluster)
    assert "--tls" in options and any(o.endswith("/tls/ca.crt") for o in options), options
    key = f"tls:{uuid.uuid4().hex}"
    assert cli(tls_cluster, 0, "set", key, "via redis-cli").stdout == b"OK\n"
    for i in (1, 2):
        assert cli(tls_cluster, i, "get", key).stdout == b"via redis-cli\n"
    plain = cli(tls_cluster, 1, "ping", options=[])
    assert b"PONG" not in plain.stdout
    refused = cli(tls_cluster, 2, "ping", options=["--tls", "--cacert", str(tls_dir / "ca.crt")])
    assert b"PONG" not in refused.stdout, refused


@pytest.mark.parametrize("payload", [
    bytes(range(256)) * 8,
    b"\x16\x03\x01\x00\x05hello" + os.urandom(512),
    b"*1\r\n$4\r\nPING\r\n",
], ids=["bytes", "broken-client-hello", "plain-resp"])
def test_garbage_on_the_tls_port_closes_only_its_connection(tls_cluster, tls_dir, payload):
    key = f"tls:{uuid.uuid4().hex}"
    with tls_client(tls_cluster, tls_dir) as r:
        r.set(key, "kept")
        before = handshake_failures(tls_cluster)
        with socket.create_connection((HOST, tls_cluster.ports[0]), timeout=10) as s:
            s.sendall(payload)
            received = b""
            while chunk := s.recv(4096):  # a TLS alert at most, then the close
                received += chunk
                assert len(received) < 1024, received
        assert r.get(key) == b"kept"  # the connection made before serves on
    deadline = time.monotonic() + 10
    while handshake_failures(tls_cluster) == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert handshake_failures(tls_cluster) == before + 1
    for i in range(3):
        with tls_client(tls_cluster, tls_dir, i) as r:
            assert r.get(key) == b"kept"
