"""Client authentication with real clients against a cluster started with
`logless up --requirepass`: redis-py with `password=` (and `username=`), redis-cli with `-a`
and `--user`/`--pass`; without the password or with a wrong one every command but AUTH,
HELLO, PING, QUIT and RESET is refused, and the password is on no process's command line.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from conftest import HOST, PASSWORD

CLI = shutil.which("redis-cli")


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def protocol(request):
    return request.param


def client(port, protocol, **kwargs):
    # No retries: redis-py takes a refused login for a connection error and retries it with
    # backoff (10 times in 8.x), seconds per refusal that test nothing of the server.
    return redis.Redis(host=HOST, port=port, protocol=protocol, socket_timeout=10,
                       decode_responses=True, retry=Retry(NoBackoff(), 0), **kwargs)


def test_redis_py_with_the_password(secured, protocol, ns):
    with client(secured.ports[0], protocol, password=PASSWORD) as r:
        assert r.set(ns + "k", "v") is True
        assert r.acl_whoami() == "default"
    # Any replica, with the user named.
    with client(secured.ports[2], protocol, username="default", password=PASSWORD) as r:
        assert r.get(ns + "k") == "v"


def test_redis_py_without_or_with_a_wrong_password_is_refused(secured, protocol, ns):
    with client(secured.ports[1], protocol, password=PASSWORD) as r:
        r.set(ns + "k", "kept")
    # redis-py's first request (HELLO 3, or CLIENT SETINFO in RESP2) is refused, as by Redis
    # with requirepass.
    with client(secured.ports[1], protocol) as r:
        with pytest.raises(redis.AuthenticationError, match="Authentication required|authenticated"):
            r.set(ns + "k", "stolen")
    with pytest.raises(redis.AuthenticationError, match="invalid username-password pair"):
        with client(secured.ports[1], protocol, password="wrong") as r:
            r.set(ns + "k", "stolen")
    with pytest.raises(redis.AuthenticationError, match="invalid username-password pair"):
        with client(secured.ports[1], protocol, username="nobody", password=PASSWORD) as r:
            r.set(ns + "k", "stolen")
    with client(secured.ports[0], protocol, password=PASSWORD) as r:
        assert r.get(ns + "k") == "kept"


def test_an_unsecured_cluster_still_takes_any_auth(addresses, ns):
    with redis.Redis(host=HOST, port=addresses[0][1], username="default",
                     password="anything", socket_timeout=10) as r:
        assert r.ping() is True
    with redis.Redis(host=HOST, port=addresses[0][1], socket_timeout=10,
                     retry=Retry(NoBackoff(), 0)) as r:
        with pytest.raises(redis.RedisError, match="without any password configured"):
            r.execute_command("AUTH", "something")


def cli(port, *args):
    return subprocess.run([CLI, "-h", HOST, "-p", str(port), "--no-auth-warning", *args],
                          capture_output=True, timeout=30)


@pytest.mark.skipif(CLI is None, reason="redis-cli not installed (apt-get install redis-tools)")
def test_redis_cli_with_a_and_with_user_and_pass(secured, ns):
    port = secured.ports[0]
    assert cli(port, "-a", PASSWORD, "set", ns + "k", "v").stdout == b"OK\n"
    assert cli(port, "--user", "default", "--pass", PASSWORD, "get", ns + "k").stdout == b"v\n"
    assert cli(port, "-3", "-a", PASSWORD, "get", ns + "k").stdout == b"v\n"
    refused = cli(port, "get", ns + "k")
    assert b"NOAUTH Authentication required" in refused.stdout + refused.stderr
    wrong = cli(port, "-a", "wrong", "get", ns + "k")
    assert b"WRONGPASS" in wrong.stdout + wrong.stderr or b"NOAUTH" in wrong.stdout + wrong.stderr


def test_the_password_is_in_a_private_file_and_on_no_command_line(secured):
    path = secured.data_dir / "requirepass"
    assert path.read_text() == PASSWORD + "\n"
    assert path.stat().st_mode & 0o777 == 0o600
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes()
        except OSError:
            continue
        assert PASSWORD.encode() not in text, cmdline
