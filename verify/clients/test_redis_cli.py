"""redis-cli and redis-benchmark (Debian's redis-tools) against the cluster.

Every test runs under both engines but those marked `engine(...)` (see conftest.py): MSET and
MULTI/EXEC over several keys are refused by the per-key engine and atomic under the log engine.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import threading

import pytest

CLI = shutil.which("redis-cli")
BENCHMARK = shutil.which("redis-benchmark")
TIMEOUT_S = 120


@pytest.fixture(scope="module", autouse=True)
def tools():
    missing = [name for name, path in (("redis-cli", CLI), ("redis-benchmark", BENCHMARK))
               if path is None]
    if missing:
        pytest.fail(f"{' and '.join(missing)} not found: install redis-tools "
                    "(apt-get install redis-tools)", pytrace=False)


def cli(port, *args, stdin=None, check=True):
    proc = subprocess.run(
        [CLI, "-h", "127.0.0.1", "-p", str(port), *map(str, args)],
        input=stdin, capture_output=True, timeout=TIMEOUT_S,
    )
    if check:
        assert proc.returncode == 0, (args, proc.returncode, proc.stdout, proc.stderr)
    return proc


def out(port, *args, **kwargs) -> str:
    return cli(port, *args, **kwargs).stdout.decode()


@pytest.fixture
def ports(cluster):
    return cluster.ports


def test_set_get(ports, ns):
    p = ports[0]
    assert out(p, "set", ns + "k", "v") == "OK\n"
    assert out(p, "get", ns + "k") == "v\n"
    assert out(p, "--no-raw", "get", ns + "k") == '"v"\n'
    assert out(p, "--no-raw", "get", ns + "missing") == "(nil)\n"
    assert out(p, "--no-raw", "incr", ns + "n") == "(integer) 1\n"
    assert out(p, "--no-raw", "sadd", ns + "s", "b", "a") == "(integer) 2\n"
    assert out(p, "--no-raw", "smembers", ns + "s") == '1) "a"\n2) "b"\n'
    assert out(p, "-3", "--no-raw", "smembers", ns + "s") == '1~ "a"\n2~ "b"\n'
    assert out(p, "-3", "--no-raw", "get", ns + "missing") == "(nil)\n"
    # Written through one replica, read through the others.
    for q in ports[1:]:
        assert out(q, "get", ns + "k") == "v\n"
        assert out(q, "get", ns + "n") == "1\n"


def test_hashes_lists_sorted_sets_and_a_transaction(ports, ns):
    """Each new type through redis-cli as a user types it, read back through another replica."""
    p, q = ports[0], ports[1]
    h, lst, z, t = ns + "h", ns + "l", ns + "z", ns + "t"
    assert out(p, "--no-raw", "hset", h, "f1", "v1", "f2", "v2") == "(integer) 2\n"
    assert out(q, "--no-raw", "hget", h, "f1") == '"v1"\n'
    assert out(q, "--no-raw", "hgetall", h) == '1) "f1"\n2) "v1"\n3) "f2"\n4) "v2"\n'
    assert out(q, "-3", "--no-raw", "hgetall", h) == '1# "f1" => "v1"\n2# "f2" => "v2"\n'
    assert out(p, "--no-raw", "hincrby", h, "n", "5") == "(integer) 5\n"
    assert out(p, "--no-raw", "rpush", lst, "a", "b", "c") == "(integer) 3\n"
    assert out(p, "--no-raw", "lpush", lst, "z") == "(integer) 4\n"
    assert out(q, "--no-raw", "lrange", lst, "0", "-1") == '1) "z"\n2) "a"\n3) "b"\n4) "c"\n'
    assert out(q, "--no-raw", "rpop", lst) == '"c"\n'
    assert out(p, "--no-raw", "zadd", z, "2", "b", "1", "a", "3", "c") == "(integer) 3\n"
    assert out(q, "--no-raw", "zrange", z, "0", "-1", "withscores") == \
        '1) "a"\n2) "1"\n3) "b"\n4) "2"\n5) "c"\n6) "3"\n'
    assert out(q, "-3", "--no-raw", "zscore", z, "b") == "(double) 2\n"
    assert out(q, "--no-raw", "zrevrank", z, "a") == "(integer) 2\n"
    # WRONGTYPE, as redis-cli shows an error reply.
    assert "WRONGTYPE" in out(p, "--no-raw", "lpush", h, "x")
    # MULTI ... EXEC on one key, typed on one connection (stdin), runs as one command.
    script = f"MULTI\nINCR {t}\nEXPIRE {t} 100\nEXEC\n".encode()
    assert out(p, "--no-raw", stdin=script).splitlines() == [
        "OK", "QUEUED", "QUEUED", "1) (integer) 1", "2) (integer) 1"]
    assert out(q, "get", t) == "1\n"


def test_errors_and_exit_codes(ports, ns):
    p = ports[1]
    proc = cli(p, "-e", "sunionstore", ns + "a", ns + "b", check=False)
    assert proc.returncode != 0
    assert b"logless does not implement 'sunionstore'" in proc.stdout + proc.stderr
    proc = cli(p, "-e", "nosuchcmd", check=False)
    assert proc.returncode != 0
    assert b"ERR unknown command 'nosuchcmd'" in proc.stdout + proc.stderr
    assert out(p, "-e", "ping") == "PONG\n"


@pytest.mark.engine("rmw", reason="the log engine runs MSET atomically "
                    "(test_mset_is_atomic_under_the_log_engine)")
def test_mset_is_refused_under_the_per_key_engine(ports, ns):
    proc = cli(ports[1], "-e", "mset", ns + "a", "1", ns + "b", "2", check=False)
    assert proc.returncode != 0
    assert b"logless does not implement 'mset'" in proc.stdout + proc.stderr
    assert out(ports[2], "exists", ns + "a", ns + "b") == "0\n"


@pytest.mark.engine("multipaxos", reason="the per-key engine refuses MSET "
                    "(test_mset_is_refused_under_the_per_key_engine)")
def test_mset_is_atomic_under_the_log_engine(ports, ns):
    """MSET through one replica, MGET through the others; then 2,000 MSETs of two keys to the
    same value while MGETs through another replica never see the two keys differ."""
    a, b = ns + "a", ns + "b"
    assert out(ports[0], "mset", a, "1", b, "2") == "OK\n"
    for q in ports[1:]:
        assert out(q, "--no-raw", "mget", a, b, ns + "c") == '1) "1"\n2) "2"\n3) (nil)\n'
    assert out(ports[0], "mset", a, "0", b, "0") == "OK\n"
    writes = 2000
    data = "".join(f"MSET {a} {i} {b} {i}\r\n" for i in range(writes)).encode()
    writer = threading.Thread(target=cli, args=(ports[0], "--pipe"), kwargs={"stdin": data})
    writer.start()
    seen = []
    while writer.is_alive() or not seen:
        seen += out(ports[1], "-r", "20", "mget", a, b).split("\n")[:-1]
    writer.join()
    pairs = list(zip(seen[::2], seen[1::2]))
    assert pairs and all(x == y for x, y in pairs), [p for p in pairs if p[0] != p[1]][:5]
    assert out(ports[2], "mget", a, b) == f"{writes - 1}\n{writes - 1}\n"


@pytest.mark.engine("multipaxos", reason="the per-key engine refuses a transaction over several "
                    "keys (test_redis_py.py's test_transaction_on_several_keys_is_refused_...)")
def test_multi_exec_over_several_keys_under_the_log_engine(ports, ns):
    """MULTI ... EXEC typed on one connection (stdin) moving 3 from one counter to another and
    setting and reading other keys, all in one atomic step, read back through the others."""
    src, dst, x, y = ns + "src", ns + "dst", ns + "x", ns + "y"
    assert out(ports[0], "set", src, "10") == "OK\n"
    script = (f"MULTI\nDECRBY {src} 3\nINCRBY {dst} 3\nMSET {x} 1 {y} 2\n"
              f"MGET {src} {dst} {x} {y}\nEXEC\n").encode()
    assert out(ports[0], "--no-raw", stdin=script).splitlines() == [
        "OK", "QUEUED", "QUEUED", "QUEUED", "QUEUED",
        "1) (integer) 7", "2) (integer) 3", "3) OK",
        '4) 1) "7"', '   2) "3"', '   3) "1"', '   4) "2"']
    for q in ports[1:]:
        assert out(q, "mget", src, dst, x, y) == "7\n3\n1\n2\n"
    # DISCARD runs nothing.
    script = f"MULTI\nINCRBY {src} 100\nDEL {dst} {x}\nDISCARD\n".encode()
    assert out(ports[1], stdin=script).splitlines() == ["OK", "QUEUED", "QUEUED", "OK"]
    assert out(ports[2], "mget", src, dst, x) == "7\n3\n1\n"


def test_commands_from_stdin_and_options(ports, ns):
    p = ports[2]
    script = f"SET {ns}a 1\nINCR {ns}a\nGET {ns}a\nNOSUCH x\nPING\n".encode()
    assert out(p, stdin=script).splitlines() == [
        "OK", "2", "2", "ERR unknown command 'NOSUCH', with args beginning with: 'x' ", "", "PONG"]
    assert out(p, "-x", "set", ns + "x", stdin=b"line1\nline2") == "OK\n"
    assert out(p, "get", ns + "x") == "line1\nline2\n"
    assert out(p, "-r", "5", "incr", ns + "r").split() == ["1", "2", "3", "4", "5"]


def test_pipe_mass_insertion(ports, ns):
    n = 10_000
    data = b"".join(
        b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n"
        % (len(k), k, len(v), v)
        for k, v in ((f"{ns}{i}".encode(), f"value-{i}".encode()) for i in range(n))
    )
    proc = cli(ports[0], "--pipe", stdin=data)
    text = proc.stdout.decode() + proc.stderr.decode()
    assert "errors: 0, replies: 10000" in text, text
    for i in (0, 1, 4999, 9999):
        for p in ports:
            assert out(p, "get", f"{ns}{i}") == f"value-{i}\n"
    assert int(out(ports[0], "dbsize")) >= n


def test_pipe_counts_errors(ports, ns):
    data = (f"SET {ns}s notanumber\r\n" + f"INCR {ns}s\r\n" * 10 + f"INCR {ns}n\r\n" * 5).encode()
    proc = cli(ports[1], "--pipe", stdin=data, check=False)
    text = proc.stdout.decode() + proc.stderr.decode()
    assert proc.returncode == 1, text  # redis-cli --pipe exits 1 when a reply was an error
    assert "errors: 10, replies: 16" in text, text
    assert out(ports[2], "get", ns + "n") == "5\n"


def test_info_server(ports):
    text = out(ports[0], "info", "server")
    assert text.startswith("# Server")
    assert re.search(r"^redis_version:\d+\.\d+\.\d+\r?$", text, re.M)
    assert f"tcp_port:{ports[0]}" in text
    assert "# Keyspace" not in text
    everything = out(ports[0], "info")
    for section in ("# Server", "# Clients", "# Stats", "# Replication", "# Keyspace"):
        assert section in everything


def test_command_docs(ports):
    proc = cli(ports[0], "command", "docs", "get")
    assert proc.stdout.decode().split("\n")[:2] == ["get", "summary"]
    count = int(out(ports[0], "command", "count"))
    assert count >= 40
    assert out(ports[0], "command", "docs").count("summary") == count


def test_benchmark_smoke(ports):
    proc = subprocess.run(
        [BENCHMARK, "-h", "127.0.0.1", "-p", str(ports[1]), "-t", "set,get,incr",
         "-n", "2000", "-c", "10", "-q"],
        capture_output=True, timeout=TIMEOUT_S,
    )
    text = proc.stdout.decode(errors="replace") + proc.stderr.decode(errors="replace")
    assert proc.returncode == 0, text
    final = text.replace("\r", "\n")
    for test in ("SET", "GET", "INCR"):
        assert re.search(rf"^{test}: [\d.]+ requests per second", final, re.M), text
    assert "error" not in final.lower(), text
    assert "Could not fetch server CONFIG" not in final, text


def test_benchmark_pipelined_smoke(ports):
    proc = subprocess.run(
        [BENCHMARK, "-h", "127.0.0.1", "-p", str(ports[2]), "-t", "set,incr",
         "-n", "2000", "-c", "4", "-P", "16", "-r", "1000", "-q"],
        capture_output=True, timeout=TIMEOUT_S,
    )
    text = (proc.stdout + proc.stderr).decode(errors="replace").replace("\r", "\n")
    assert proc.returncode == 0, text
    assert "error" not in text.lower(), text
