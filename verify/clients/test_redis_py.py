"""redis-py against a 3-replica logless cluster, in RESP2 and RESP3.

Every test runs twice (protocol=2 and protocol=3). The cluster is shared by the whole session,
so every key is prefixed with the test's own uuid (`ns`).
"""
from __future__ import annotations

import threading
import time

import pytest
import redis

I64_MAX = 2**63 - 1
I64_MIN = -(2**63)
NOT_INTEGER = "value is not an integer or out of range"
WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"


def connect(addr, protocol, decode=True, **kwargs) -> redis.Redis:
    host, port = addr
    return redis.Redis(
        host=host,
        port=port,
        protocol=protocol,
        decode_responses=decode,
        socket_timeout=20,
        socket_connect_timeout=5,
        single_connection_client=True,
        **kwargs,
    )


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def protocol(request):
    return request.param


@pytest.fixture
def r(addresses, protocol):
    """A client of replica 1."""
    client = connect(addresses[0], protocol)
    yield client
    client.close()


@pytest.fixture
def rb(addresses, protocol):
    """A client of replica 2 without decoding (bytes in, bytes out)."""
    client = connect(addresses[1], protocol, decode=False)
    yield client
    client.close()


@pytest.fixture
def rs(addresses, protocol):
    """One client per replica."""
    clients = [connect(a, protocol) for a in addresses]
    yield clients
    for c in clients:
        c.close()


def error_text(excinfo) -> str:
    return str(excinfo.value)


TTL_MS = 500


class Deadline:
    """Timing for expiry tests: the checks before expiry must run well within the TTL (else
    the machine is too slow to judge), the checks after it wait until the TTL plus a margin."""

    def __init__(self, ttl_ms: int = TTL_MS):
        self.start = time.monotonic()
        self.ttl = ttl_ms / 1000

    def still_fresh(self):
        elapsed = time.monotonic() - self.start
        assert elapsed < self.ttl * 0.8, f"too slow to test expiry: {elapsed:.3f} s elapsed"

    def wait_expired(self, margin: float = 0.3):
        time.sleep(max(0.0, self.start + self.ttl + margin - time.monotonic()))


# --- connection ---------------------------------------------------------------------------


def test_handshake_speaks_the_requested_protocol(r, protocol):
    assert r.client_info()["resp"] == str(protocol)
    hello = r.execute_command("HELLO")
    if isinstance(hello, list):  # RESP2: the map comes as a flat array
        hello = dict(zip(hello[::2], hello[1::2]))
    assert hello["proto"] == protocol
    assert hello["server"] == "redis"
    assert hello["mode"] == "standalone"


def test_hello_unsupported_version(r):
    with pytest.raises(redis.ResponseError) as e:
        r.execute_command("HELLO", 4)
    assert "NOPROTO" in error_text(e)
    assert r.ping() is True


def test_ping_echo(r, rb):
    assert r.ping() is True
    # PING with a message is checked on the wire in test_bad_input.py (redis-py maps the
    # reply of PING to a bool).
    assert r.echo("hello world") == "hello world"
    assert rb.echo(b"\x00\xff\r\n") == b"\x00\xff\r\n"


# --- strings ------------------------------------------------------------------------------


def test_set_get(r, ns):
    k = ns + "k"
    assert r.get(k) is None
    assert r.set(k, "v1") is True
    assert r.get(k) == "v1"
    assert r.set(k, "v2") is True
    assert r.get(k) == "v2"
    assert r.set(k, "") is True
    assert r.get(k) == ""
    assert r.exists(k) == 1


def test_binary_keys_and_values(rb, ns):
    k = ns.encode() + b"bin\x00\r\n\xff"
    v = bytes(range(256)) * 4
    assert rb.set(k, v) is True
    assert rb.get(k) == v
    assert rb.delete(k) == 1


def test_set_nx_xx(r, ns):
    k = ns + "k"
    assert r.set(k, "a", xx=True) is None
    assert r.get(k) is None
    assert r.set(k, "a", nx=True) is True
    assert r.set(k, "b", nx=True) is None
    assert r.get(k) == "a"
    assert r.set(k, "c", xx=True) is True
    assert r.get(k) == "c"


def test_set_get_option(r, ns):
    k = ns + "k"
    assert r.set(k, "a", get=True) is None
    assert r.set(k, "b", get=True) == "a"
    # NX with GET (Redis 7): the old value, and nothing written.
    assert r.set(k, "c", nx=True, get=True) == "b"
    assert r.get(k) == "b"
    r.incr(ns + "n")
    assert r.set(ns + "n", "x", get=True) == "1"


def test_set_px_expires(rs, ns):
    k = ns + "k"
    ttl = Deadline()
    assert rs[0].set(k, "v", px=TTL_MS) is True
    assert rs[1].get(k) == "v"
    ttl.still_fresh()
    ttl.wait_expired()
    for c in rs:
        assert c.get(k) is None
        assert c.exists(k) == 0
    # An expired key can be set again with NX.
    assert rs[2].set(k, "w", nx=True) is True


def test_set_ex_keepttl_and_plain_set_clears_ttl(r, ns):
    a, b, c = ns + "a", ns + "b", ns + "c"
    assert r.set(a, "v", ex=100) is True
    assert r.get(a) == "v"
    # KEEPTTL keeps a short TTL, a plain SET clears it, INCR keeps it.
    ttl = Deadline()
    assert r.set(b, "1", px=TTL_MS) is True
    assert r.set(b, "2", keepttl=True) is True
    assert r.set(a, "x", px=TTL_MS) is True
    assert r.set(a, "y") is True
    assert r.set(c, "5", px=TTL_MS) is True
    assert r.incr(c) == 6
    ttl.still_fresh()
    ttl.wait_expired()
    assert r.get(b) is None
    assert r.get(a) == "y"
    assert r.get(c) is None


def test_set_exat_pxat(r, ns):
    k = ns + "k"
    assert r.set(k, "v", exat=1) is True  # in the past: gone at once, as in Redis
    assert r.get(k) is None
    ttl = Deadline()
    assert r.set(k, "v", pxat=int(time.time() * 1000) + TTL_MS) is True
    assert r.get(k) == "v"
    ttl.still_fresh()
    ttl.wait_expired()
    assert r.get(k) is None


def test_set_invalid_expire_and_syntax(r, ns):
    k = ns + "k"
    for args in (("EX", 0), ("PX", -1), ("EX", I64_MAX)):
        with pytest.raises(redis.ResponseError) as e:
            r.execute_command("SET", k, "v", *args)
        assert error_text(e) == "invalid expire time in 'set' command"
    with pytest.raises(redis.ResponseError) as e:
        r.execute_command("SET", k, "v", "PX", "abc")
    assert error_text(e) == NOT_INTEGER
    for args in (("NX", "XX"), ("EX", 10, "PX", 10), ("KEEPTTL", "EX", 10), ("BOGUS",), ("EX",)):
        with pytest.raises(redis.ResponseError) as e:
            r.execute_command("SET", k, "v", *args)
        assert error_text(e) == "syntax error"
    assert r.exists(k) == 0


def test_setnx(r, ns):
    k = ns + "k"
    assert r.setnx(k, "a") is True
    assert r.setnx(k, "b") is False
    assert r.get(k) == "a"
    assert r.execute_command("SETNX", ns + "raw", "x") == 1


def test_set_conditional_ifeq_ifne(r, ns):
    k = ns + "k"
    assert r.execute_command("SET", k, "v2", "IFEQ", "v1") is None  # absent: not set
    assert r.execute_command("SET", k, "v1", "IFNE", "zz") in (True, "OK")  # absent qualifies
    assert r.execute_command("SET", k, "v2", "IFEQ", "nope") is None
    assert r.execute_command("SET", k, "v2", "IFEQ", "v1") in (True, "OK")
    assert r.execute_command("SET", k, "v3", "IFNE", "v2") is None
    assert r.get(k) == "v2"


def test_del_multiple_keys(r, ns):
    a, b, c = ns + "a", ns + "b", ns + "c"
    r.set(a, "1")
    r.set(b, "2")
    r.sadd(c, "m")
    assert r.delete(a, b, c, ns + "missing") == 3
    assert r.delete(a) == 0
    assert r.exists(a, b, c) == 0


def test_exists_multiple_keys(r, ns):
    a, b = ns + "a", ns + "b"
    r.set(a, "1")
    r.sadd(b, "x")
    assert r.exists(a) == 1
    assert r.exists(a, b, ns + "missing") == 2
    assert r.exists(a, a, a) == 3  # repeated keys count each time, as in Redis


def test_mget(r, ns):
    a, b, s = ns + "a", ns + "b", ns + "s"
    r.set(a, "1")
    r.incr(b)
    r.sadd(s, "x")
    assert r.mget(a, ns + "missing", b, s, a) == ["1", None, "1", None, "1"]


# --- counters -------------------------------------------------------------------------------


def test_incr_decr_family(r, ns):
    k = ns + "k"
    assert r.incr(k) == 1
    assert r.incrby(k, 10) == 11
    assert r.decr(k) == 10
    assert r.decrby(k, 4) == 6
    assert r.incrby(k, -10) == -4
    assert r.get(k) == "-4"
    assert r.set(k, "41") is True
    assert r.incr(k) == 42


def test_incr_overflow(r, ns):
    k = ns + "k"
    r.set(k, str(I64_MAX))
    with pytest.raises(redis.ResponseError) as e:
        r.incr(k)
    assert error_text(e) == "increment or decrement would overflow"
    assert r.get(k) == str(I64_MAX)
    r.set(k, str(I64_MIN))
    with pytest.raises(redis.ResponseError) as e:
        r.decr(k)
    assert error_text(e) == "increment or decrement would overflow"
    with pytest.raises(redis.ResponseError) as e:
        r.decrby(ns + "other", I64_MIN)
    assert error_text(e) == "decrement would overflow"
    assert r.incrby(ns + "min", I64_MIN) == I64_MIN


def test_incr_non_integer(r, ns):
    k = ns + "k"
    for bad in ("abc", "1.5", " 1", "010", "+1", "", "99999999999999999999"):
        r.set(k, bad)
        with pytest.raises(redis.ResponseError) as e:
            r.incr(k)
        assert error_text(e) == NOT_INTEGER, bad
        assert r.get(k) == bad
    for bad in ("x", "1.0", "", "9223372036854775808"):
        with pytest.raises(redis.ResponseError) as e:
            r.incrby(ns + "n", bad)
        assert error_text(e) == NOT_INTEGER, bad
        with pytest.raises(redis.ResponseError) as e:
            r.decrby(ns + "n", bad)
        assert error_text(e) == NOT_INTEGER, bad
    assert r.exists(ns + "n") == 0


# --- sets -----------------------------------------------------------------------------------


def test_sets(r, ns):
    k = ns + "s"
    assert r.sadd(k, "a", "b", "c", "a") == 3
    assert r.sadd(k, "a") == 0
    assert r.scard(k) == 3
    assert r.sismember(k, "a") in (1, True)
    assert r.sismember(k, "zz") in (0, False)
    assert r.srem(k, "a", "zz") == 1
    members = r.smembers(k)
    assert isinstance(members, set)
    assert members == {"b", "c"}
    assert r.srem(k, "b", "c") == 2
    assert r.exists(k) == 0  # the last member removed removes the key
    assert r.smembers(k) == set()
    assert r.scard(k) == 0
    assert r.srem(k, "x") == 0


def test_smembers_binary_members(rb, ns):
    k = ns.encode() + b"s"
    members = {b"\x00", b"\xff\xfe", b"a b", b""}
    assert rb.sadd(k, *members) == 4
    got = rb.smembers(k)
    assert isinstance(got, set)
    assert got == members


# --- DIGEST / DELEX (Redis 8.4) ----------------------------------------------------------


def test_digest_and_delex_via_execute_command(r, ns):
    k = ns + "k"
    assert r.execute_command("DIGEST", k) is None
    r.set(k, "Hello world")
    # The example of Redis's DIGEST documentation (XXH3-64, 16 hex digits).
    digest = r.execute_command("DIGEST", k)
    assert digest == "b6acb9d84a38ff74"
    assert r.execute_command("DELEX", k, "IFEQ", "other") == 0
    assert r.execute_command("DELEX", k, "IFNE", "Hello world") == 0
    assert r.execute_command("DELEX", k, "IFDNE", digest) == 0
    assert r.execute_command("DELEX", k, "IFDEQ", "0123456789abcdef") == 0
    assert r.get(k) == "Hello world"
    assert r.execute_command("DELEX", k, "IFDEQ", digest.upper()) == 1
    assert r.exists(k) == 0
    assert r.execute_command("DELEX", k) == 0
    r.set(k, "v")
    assert r.execute_command("DELEX", k, "IFEQ", "v") == 1
    r.set(k, "v")
    assert r.execute_command("DELEX", k, "IFNE", "w") == 1
    r.set(k, "v")
    assert r.execute_command("DELEX", k) == 1
    # an integer value digests as its decimal string
    r.incrby(k, 5)
    r.set(ns + "s5", "5")
    assert r.execute_command("DIGEST", k) == r.execute_command("DIGEST", ns + "s5")


def test_delex_digest_errors(r, ns):
    k = ns + "k"
    r.set(k, "v")
    for bad in ("zz", "", "12345678901234567"):
        with pytest.raises(redis.ResponseError) as e:
            r.execute_command("DELEX", k, "IFDEQ", bad)
        assert error_text(e) == "invalid digest: expected 1 to 16 hexadecimal digits"
    for args in (("IFEQ",), ("BOGUS", "x"), ("IFEQ", "a", "b")):
        with pytest.raises(redis.ResponseError) as e:
            r.execute_command("DELEX", k, *args)
        assert error_text(e) == "syntax error"
    r.sadd(ns + "s", "m")
    with pytest.raises(redis.ResponseError) as e:
        r.execute_command("DIGEST", ns + "s")
    assert error_text(e) == WRONGTYPE
    with pytest.raises(redis.ResponseError) as e:
        r.execute_command("DELEX", ns + "s", "IFEQ", "m")
    assert error_text(e) == WRONGTYPE
    assert r.get(k) == "v"


def test_digest_delex_native_methods(r, ns):
    """redis-py's own digest()/delex()/set(ifeq=...) methods (both pinned versions have them)."""
    k = ns + "k"
    r.set(k, "Hello world")
    digest = r.digest(k)
    assert digest == "b6acb9d84a38ff74"
    assert r.set(k, "new", ifdeq=digest) in (True, "OK")
    assert r.get(k) == "new"
    assert r.set(k, "newer", ifeq="wrong") is None
    assert r.delex(k, ifeq="wrong") == 0
    assert r.delex(k, ifeq="new") == 1
    assert r.exists(k) == 0


# --- locks ----------------------------------------------------------------------------------


def test_lock_acquire_release_fencing_token_grows(r, ns):
    k = ns + "lock"
    t1 = r.execute_command("LOCK.ACQUIRE", k, "owner-a", 10000)
    assert isinstance(t1, int) and t1 >= 1
    assert r.execute_command("LOCK.ACQUIRE", k, "owner-b", 10000) is None
    # Re-acquiring by the holder extends the lease and keeps the token.
    assert r.execute_command("LOCK.ACQUIRE", k, "owner-a", 10000) == t1
    assert r.execute_command("LOCK.RELEASE", k, "owner-b") == 0
    assert r.execute_command("LOCK.RELEASE", k, "owner-a") == 1
    assert r.execute_command("LOCK.RELEASE", k, "owner-a") == 0
    t2 = r.execute_command("LOCK.ACQUIRE", k, "owner-b", 10000)
    assert t2 > t1
    assert r.execute_command("LOCK.RELEASE", k, "owner-b") == 1
    t3 = r.execute_command("LOCK.ACQUIRE", k, "owner-a", 10000)
    assert t3 > t2
    assert r.exists(k) == 1


def test_lock_lease_expires(rs, ns):
    k = ns + "lock"
    ttl = Deadline()
    t1 = rs[0].execute_command("LOCK.ACQUIRE", k, "a", TTL_MS)
    assert rs[1].execute_command("LOCK.ACQUIRE", k, "b", 10000) is None
    ttl.still_fresh()
    ttl.wait_expired()
    t2 = rs[2].execute_command("LOCK.ACQUIRE", k, "b", 10000)
    assert t2 is not None and t2 > t1
    assert rs[0].execute_command("LOCK.RELEASE", k, "a") == 0


def test_lock_errors(r, ns):
    k = ns + "lock"
    for lease in (0, -1):
        with pytest.raises(redis.ResponseError) as e:
            r.execute_command("LOCK.ACQUIRE", k, "a", lease)
        assert error_text(e) == "invalid lease time in 'lock.acquire' command"
    with pytest.raises(redis.ResponseError) as e:
        r.execute_command("LOCK.ACQUIRE", k, "a", "soon")
    assert error_text(e) == NOT_INTEGER
    with pytest.raises(redis.ResponseError) as e:
        r.execute_command("LOCK.ACQUIRE", k, "a")
    assert error_text(e) == "wrong number of arguments for 'lock.acquire' command"
    r.execute_command("LOCK.ACQUIRE", k, "a", 10000)
    for call in (lambda: r.get(k), lambda: r.incr(k), lambda: r.sadd(k, "x")):
        with pytest.raises(redis.ResponseError) as e:
            call()
        assert error_text(e) == WRONGTYPE
    r.set(ns + "str", "v")
    with pytest.raises(redis.ResponseError) as e:
        r.execute_command("LOCK.ACQUIRE", ns + "str", "a", 1000)
    assert error_text(e) == WRONGTYPE
    with pytest.raises(redis.ResponseError) as e:
        r.execute_command("LOCK.RELEASE", ns + "str", "a")
    assert error_text(e) == WRONGTYPE


def test_lock_fencing_token_never_decreases_across_del(r, ns):
    k = ns + "lock"
    t1 = r.execute_command("LOCK.ACQUIRE", k, "a", 10000)
    assert r.execute_command("LOCK.RELEASE", k, "a") == 1
    t2 = r.execute_command("LOCK.ACQUIRE", k, "b", 10000)
    assert t2 > t1
    assert r.delete(k) == 1
    t3 = r.execute_command("LOCK.ACQUIRE", k, "c", 10000)
    assert t3 > t2


def test_lock_recipe_set_nx_px_then_delex_ifeq(rs, ns):
    """The documented lock recipe: SET key token NX PX 10000, then DELEX key IFEQ token."""
    k = ns + "lock"
    assert rs[0].set(k, "token-1", nx=True, px=10000) is True
    assert rs[1].set(k, "token-2", nx=True, px=10000) is None  # held
    assert rs[1].execute_command("DELEX", k, "IFEQ", "token-2") == 0  # not the holder
    assert rs[2].get(k) == "token-1"
    assert rs[0].execute_command("DELEX", k, "IFEQ", "token-1") == 1  # released
    assert rs[1].set(k, "token-2", nx=True, px=10000) is True
    assert rs[2].get(k) == "token-2"


# --- errors ---------------------------------------------------------------------------------


def test_wrongtype(r, ns):
    s, k = ns + "s", ns + "k"
    r.sadd(s, "a")
    r.set(k, "v")
    calls = [
        lambda: r.get(s),
        lambda: r.incr(s),
        lambda: r.set(s, "v", get=True),
        lambda: r.sadd(k, "x"),
        lambda: r.srem(k, "x"),
        lambda: r.smembers(k),
        lambda: r.sismember(k, "x"),
        lambda: r.scard(k),
    ]
    for call in calls:
        with pytest.raises(redis.ResponseError) as e:
            call()
        assert error_text(e) == WRONGTYPE
    # SET without GET overwrites a key of any type, as in Redis.
    assert r.set(s, "now a string") is True
    assert r.get(s) == "now a string"


@pytest.mark.engine("rmw", reason="the log engine runs MSET, MSETNX, RENAME and SMOVE atomically "
                    "(test_commands_over_several_keys_are_atomic_under_the_log_engine) and "
                    "serves WATCH (test_watch_aborts_exec_after_a_change_under_the_log_engine)")
def test_refused_multi_key_commands_name_the_reason(r, ns):
    a, b = ns + "a", ns + "b"
    with pytest.raises(redis.ResponseError) as e:
        r.mset({a: "1", b: "2"})
    assert error_text(e).startswith("logless does not implement 'mset': ")
    assert "cannot be atomic" in error_text(e)
    assert r.exists(a, b) == 0
    r.set(a, "1")
    cases = {
        ("MSETNX", a, "1", b, "2"): "cannot be atomic",
        ("RENAME", a, b): "cannot be atomic",
        ("SMOVE", a, b, "m"): "cannot be atomic",
        ("SUNIONSTORE", a, b): "cannot be atomic",
        ("SUBSCRIBE", "ch"): "no publish/subscribe",
        ("BLPOP", a, 0): "nothing waits",
        ("EVAL", "return 1", 0): "script",
        ("WATCH", a): "needs no WATCH",
    }
    for args, reason in cases.items():
        with pytest.raises(redis.ResponseError) as e:
            r.execute_command(*args)
        text = error_text(e)
        assert text.startswith(f"logless does not implement '{args[0].lower()}': "), text
        assert reason in text, text
    assert r.get(a) == "1"
    assert r.exists(b) == 0


@pytest.mark.engine("multipaxos", reason="the per-key engine refuses commands over several keys "
                    "(test_refused_multi_key_commands_name_the_reason)")
def test_commands_over_several_keys_are_atomic_under_the_log_engine(r, rs, ns):
    a, b, c = ns + "a", ns + "b", ns + "c"
    assert r.mset({a: "1", b: "2"}) is True
    assert [client.mget(a, b, c) for client in rs] == [["1", "2", None]] * 3
    assert r.msetnx({b: "x", c: "y"}) is False
    assert r.exists(c) == 0
    assert r.rename(a, c) in (True, "OK")
    assert r.mget(a, c) == [None, "1"]
    r.sadd(a, "m")
    assert r.smove(a, b + "set", "m") is True
    assert r.smembers(b + "set") == {"m"}
    assert r.copy(c, a) in (True, 1) and r.get(a) == "1"
    with pytest.raises(redis.ResponseError) as e:
        r.rename(ns + "missing", a)
    assert error_text(e) == "no such key"
    # Still not implemented under either engine, with the reason.
    with pytest.raises(redis.ResponseError) as e:
        r.execute_command("SUNIONSTORE", a, b)
    assert error_text(e).startswith("logless does not implement 'sunionstore': ")


@pytest.mark.engine("multipaxos", reason="a transaction over several keys is atomic only in the log "
                    "engine (test_transaction_on_several_keys_is_refused_and_applies_nothing)")
def test_transaction_over_several_keys_is_one_atomic_step_under_the_log_engine(r, ns):
    src, dst = ns + "src", ns + "dst"
    r.set(src, 10)
    pipe = r.pipeline()  # transaction=True by default
    pipe.decrby(src, 3)
    pipe.incrby(dst, 3)
    pipe.mget(src, dst)
    pipe.mset({ns + "x": "1", ns + "y": "2"})
    pipe.exists(ns + "x", ns + "y", ns + "z")
    pipe.delete(ns + "x", ns + "z")
    assert pipe.execute() == [7, 3, ["7", "3"], True, 2, 1]
    # Errors inside EXEC answer in their place and the others apply, as in Redis.
    pipe.set(src, "text")
    pipe.incr(src)
    pipe.incr(dst)
    results = pipe.execute(raise_on_error=False)
    assert results[0] is True and isinstance(results[1], redis.ResponseError)
    assert results[2] == 4


@pytest.mark.engine("multipaxos", reason="the per-key engine refuses WATCH "
                    "(test_refused_multi_key_commands_name_the_reason)")
def test_watch_aborts_exec_after_a_change_under_the_log_engine(r, rs, ns):
    k, x = ns + "k", ns + "x"
    r.set(k, "1")
    with r.pipeline() as pipe:
        pipe.watch(k)
        assert pipe.get(k) == "1"  # immediate mode between WATCH and MULTI
        rs[1].set(k, "2")  # another client, through another replica
        pipe.multi()
        pipe.set(x, "1")
        with pytest.raises(redis.WatchError):
            pipe.execute()
    assert r.exists(x) == 0
    with r.pipeline() as pipe:
        pipe.watch(k)
        rs[2].set(x, "other key")
        pipe.multi()
        pipe.incr(k)
        assert pipe.execute() == [3]


@pytest.mark.engine("multipaxos", reason="the per-key engine refuses WATCH "
                    "(test_refused_multi_key_commands_name_the_reason)")
def test_watch_check_and_set_retry_loop_under_the_log_engine(rs, ns):
    """redis-py's classic optimistic increment (WATCH, GET, MULTI, SET, EXEC, retry on
    WatchError) from threads through every replica: no increment is lost, so the counter ends
    at the number of transactions that committed."""
    counter = ns + "counter"
    rs[0].set(counter, 0)
    per_thread, threads = 15, 6
    committed, aborted, failures = [], [], []

    def worker(client):
        done = retries = 0
        try:
            with client.pipeline() as pipe:
                while done < per_thread:
                    try:
                        pipe.watch(counter)
                        value = int(pipe.get(counter))
                        pipe.multi()
                        pipe.set(counter, value + 1)
                        pipe.execute()
                        done += 1
                    except redis.WatchError:
                        retries += 1
        except Exception as e:  # reported below, not lost in the thread
            failures.append(e)
        committed.append(done)
        aborted.append(retries)

    pool = [threading.Thread(target=worker, args=(rs[i % len(rs)],)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(timeout=120)
    assert not failures, failures
    assert sum(committed) == per_thread * threads
    assert int(rs[1].get(counter)) == sum(committed), (committed, aborted)


def test_transaction_pipeline_on_one_key(r, ns):
    """redis-py's default pipeline (transaction=True) is MULTI ... EXEC; on one key it runs
    as one register command: the rate-limiter pattern INCR + EXPIRE."""
    k = ns + "hits"
    pipe = r.pipeline()  # transaction=True by default
    pipe.incr(k)
    pipe.expire(k, 10)
    assert pipe.execute() == [1, True]
    pipe.incr(k)
    pipe.ttl(k)
    pipe.get(k)
    hits, ttl, text = pipe.execute()
    assert hits == 2 and 0 < ttl <= 10 and text == "2"
    # Each reply keeps its own shape: a set, a map, a float.
    pipe.delete(k)
    pipe.hset(k, mapping={"f": "1"})
    pipe.hgetall(k)
    pipe.hincrbyfloat(k, "f", 0.5)
    assert pipe.execute() == [1, 1, {"f": "1"}, 1.5]


def test_transaction_errors_inside_exec_keep_the_others(r, ns):
    k = ns + "k"
    pipe = r.pipeline()
    pipe.set(k, "text")
    pipe.incr(k)  # fails when run, as in Redis, and the others still apply
    pipe.append(k, "!")
    results = pipe.execute(raise_on_error=False)
    assert results[0] is True
    assert isinstance(results[1], redis.ResponseError)
    assert results[2] == 5
    assert r.get(k) == "text!"


@pytest.mark.engine("rmw", reason="the log engine runs a transaction over several keys as one "
                    "atomic step (test_transaction_over_several_keys_is_one_atomic_step_under_"
                    "the_log_engine)")
def test_transaction_on_several_keys_is_refused_and_applies_nothing(r, ns):
    pipe = r.pipeline()  # transaction=True by default
    pipe.set(ns + "k", "v")
    pipe.incr(ns + "n")
    with pytest.raises(redis.ResponseError) as e:
        pipe.execute()
    text = error_text(e)
    assert text.startswith("Transaction discarded: its commands name several keys"), text
    assert "not atomic across keys in the per-key engine" in text
    assert r.exists(ns + "k", ns + "n") == 0
    # The connection goes on.
    assert r.ping() is True


def test_transaction_with_a_syntax_error_is_discarded(r, ns):
    k = ns + "k"
    pipe = r.pipeline()
    pipe.set(k, "v")
    pipe.execute_command("ZADD", k, "NX", "XX", 1, "m")
    with pytest.raises(redis.ResponseError) as e:
        pipe.execute()
    assert "XX and NX options at the same time are not compatible" in error_text(e)
    assert r.exists(k) == 0


def test_multi_exec_discard_by_hand(r, ns):
    k = ns + "k"
    assert r.execute_command("MULTI") in ("OK", True)
    assert r.execute_command("INCR", k) == "QUEUED"
    assert r.execute_command("DISCARD") in ("OK", True)
    assert r.exists(k) == 0
    with pytest.raises(redis.ResponseError) as e:
        r.execute_command("EXEC")
    assert error_text(e) == "EXEC without MULTI"
    assert r.execute_command("MULTI") in ("OK", True)
    assert r.execute_command("EXEC") == []


def test_unknown_command(r):
    with pytest.raises(redis.ResponseError) as e:
        r.execute_command("NOSUCHCMD", "a", "b")
    assert error_text(e) == "unknown command 'NOSUCHCMD', with args beginning with: 'a' 'b' "
    with pytest.raises(redis.ResponseError) as e:
        r.execute_command("CLIENT", "NOSUCHSUB")
    assert error_text(e) == "unknown subcommand 'NOSUCHSUB'. Try CLIENT HELP."
    assert r.ping() is True


def test_wrong_arity(r, ns):
    for args, name in [
        (("GET",), "get"),
        (("GET", "a", "b"), "get"),
        (("SET", ns + "k"), "set"),
        (("INCRBY", ns + "k"), "incrby"),
        (("SADD", ns + "k"), "sadd"),
        (("MGET",), "mget"),
        (("ECHO",), "echo"),
        (("PING", "a", "b"), "ping"),
    ]:
        with pytest.raises(redis.ResponseError) as e:
            r.execute_command(*args)
        assert error_text(e) == f"wrong number of arguments for '{name}' command"


def test_size_limits(r, ns):
    k = ns + "k"
    bulk_limit = int(r.config_get("proto-max-bulk-len")["proto-max-bulk-len"])
    limit = 1 << 20  # the largest value, and the longest argument
    assert bulk_limit == limit
    assert r.set(k, "x" * limit) is True
    assert len(r.get(k)) == limit
    with pytest.raises(redis.ResponseError) as e:
        r.set(k, "x" * (limit + 1))
    assert error_text(e) == "value exceeds the configured size limit"
    assert len(r.get(k)) == limit
    with pytest.raises(redis.ResponseError) as e:
        r.set("k" * 1025, "v")
    assert error_text(e) == "key of 1025 bytes exceeds the limit of 1024"
    assert r.set(ns + "x" * (1024 - len(ns) - 1), "v") is True


# --- hashes, lists, sorted sets, string and set additions ----------------------------------


def pairs(result):
    """ZRANGE WITHSCORES and ZPOPMIN as tuples: RESP2 gives tuples, RESP3 two-element lists."""
    return [tuple(p) for p in result]


def test_hashes(r, ns):
    h = ns + "h"
    assert r.hset(h, mapping={"a": "1", "b": "2"}) == 2
    assert r.hset(h, "a", "10") == 0
    assert r.hget(h, "a") == "10"
    assert r.hget(h, "missing") is None
    assert r.hmget(h, ["a", "x", "b"]) == ["10", None, "2"]
    assert r.hsetnx(h, "a", "x") == 0
    assert r.hsetnx(h, "c", "3") == 1
    assert r.hlen(h) == 3
    assert r.hexists(h, "c") is True
    assert r.hstrlen(h, "a") == 2
    assert r.hkeys(h) == ["a", "b", "c"]
    assert r.hvals(h) == ["10", "2", "3"]
    assert r.hgetall(h) == {"a": "10", "b": "2", "c": "3"}
    assert r.hincrby(h, "a", -3) == 7
    assert r.hincrbyfloat(h, "b", 0.5) == 2.5
    assert r.hget(h, "b") == "2.5"
    with pytest.raises(redis.ResponseError) as e:
        r.hincrby(h, "b", 1)
    assert error_text(e) == "hash value is not an integer"
    assert r.hrandfield(h) in ("a", "b", "c")
    assert sorted(r.hrandfield(h, 5)) == ["a", "b", "c"]
    assert len(r.hrandfield(h, -5)) == 5
    cursor, seen = 0, {}
    while True:
        cursor, part = r.hscan(h, cursor, count=1)
        seen.update(part)
        if cursor == 0:
            break
    assert seen == {"a": "7", "b": "2.5", "c": "3"}
    assert r.hmset(h, {"d": "4"}) is True
    assert r.hdel(h, "a", "b", "c", "d", "zz") == 4
    assert r.exists(h) == 0  # an emptied hash is deleted
    r.set(ns + "s", "x")
    with pytest.raises(redis.ResponseError) as e:
        r.hget(ns + "s", "f")
    assert str(e.value) == WRONGTYPE


def test_lists(r, ns):
    k = ns + "l"
    assert r.rpush(k, "a", "b", "c") == 3
    assert r.lpush(k, "z") == 4
    assert r.lrange(k, 0, -1) == ["z", "a", "b", "c"]
    assert r.llen(k) == 4
    assert r.lindex(k, -1) == "c"
    assert r.lindex(k, 10) is None
    assert r.lset(k, 0, "y") is True
    with pytest.raises(redis.ResponseError) as e:
        r.lset(k, 10, "x")
    assert error_text(e) == "index out of range"
    assert r.linsert(k, "before", "b", "a") == 5
    assert r.lrem(k, 0, "a") == 2
    assert r.lpos(k, "c") == 2
    assert r.lpos(k, "nope") is None
    assert r.rpush(k, "c") == 4
    assert r.lpos(k, "c", count=0) == [2, 3]
    with pytest.raises(redis.ResponseError) as e:
        r.lpos(k, "c", rank=0)
    assert error_text(e).startswith("RANK can't be zero")
    assert r.lmove(k, k, "LEFT", "RIGHT") == "y"
    assert r.rpoplpush(k, k) == "y"
    assert r.lrange(k, 0, -1) == ["y", "b", "c", "c"]
    assert r.ltrim(k, 1, 2) is True
    assert r.lpop(k) == "b"
    assert r.rpop(k, 5) == ["c"]
    assert r.exists(k) == 0
    assert r.lpop(k) is None
    assert r.lpop(k, 2) is None  # a null array, in RESP2 and RESP3
    assert r.lpushx(k, "x") == 0
    with pytest.raises(redis.ResponseError) as e:
        r.lmove(k, ns + "other")
    assert "not atomic across keys in the per-key engine" in error_text(e)


def test_sorted_sets(r, ns, protocol):
    z = ns + "z"
    assert r.zadd(z, {"a": 1, "b": 2, "c": 3.5}) == 3
    assert r.zadd(z, {"a": 5}, gt=True, ch=True) == 1
    assert r.zadd(z, {"a": 0}, gt=True, ch=True) == 0
    assert r.zadd(z, {"b": 1}, incr=True) == 3.0
    assert r.zscore(z, "c") == 3.5
    assert r.zscore(z, "x") is None
    assert r.zmscore(z, ["a", "x"]) == [5.0, None]
    assert r.zincrby(z, 0.25, "c") == 3.75
    assert r.zcard(z) == 3
    assert r.zcount(z, "(3", "+inf") == 2
    assert r.zrank(z, "b") == 0
    assert r.zrevrank(z, "b") == 2
    assert r.zrange(z, 0, -1) == ["b", "c", "a"]
    assert pairs(r.zrange(z, 0, 0, withscores=True)) == [("b", 3.0)]
    assert r.zrange(z, 0, -1, desc=True) == ["a", "c", "b"]  # ZREVRANGE
    assert r.zrange(z, "(3", 10, byscore=True) == ["c", "a"]
    assert r.zrange(z, 10, "(3", byscore=True, desc=True, offset=0, num=1) == ["a"]
    assert r.zrangebyscore(z, 3, 4) == ["b", "c"]
    assert r.zrevrangebyscore(z, "+inf", 4) == ["a"]
    with pytest.raises(redis.ResponseError) as e:
        r.execute_command("ZRANGE", z, 0, 1, "LIMIT", 0, 1)
    assert "LIMIT is only supported in combination with either BYSCORE or BYLEX" in error_text(e)
    r.zadd(ns + "lex", {"a": 0, "b": 0, "c": 0})
    assert r.zrange(ns + "lex", "[b", "+", bylex=True) == ["b", "c"]
    assert r.zrangebylex(ns + "lex", "-", "(b") == ["a"]
    cursor, seen = 0, []
    while True:
        cursor, part = r.zscan(z, cursor, count=1)
        seen += [m for m, _ in part]
        if cursor == 0:
            break
    assert sorted(seen) == ["a", "b", "c"]
    # Without a count the reply is flat: redis-py pairs it in RESP2 only (as with Redis).
    assert r.zpopmin(z) == ([("b", 3.0)] if protocol == 2 else ["b", 3.0])
    assert pairs(r.zpopmax(z, 5)) == [("a", 5.0), ("c", 3.75)]
    assert r.exists(z) == 0
    assert r.zrem(ns + "lex", "a", "x") == 1
    with pytest.raises(redis.ResponseError) as e:
        r.execute_command("ZADD", z, "NX", "XX", 1, "a")
    assert error_text(e) == "XX and NX options at the same time are not compatible"


def test_string_and_set_additions(r, ns):
    k = ns + "k"
    assert r.incrbyfloat(k, 10.5) == 10.5
    assert r.incrbyfloat(k, 0.1) == pytest.approx(10.6)
    assert r.get(k) == "10.6"
    assert r.getrange(k, 0, 1) == "10"
    assert r.setrange(k, 2, "!!") == 4
    assert r.get(k) == "10!!"
    assert r.getex(k, ex=100) == "10!!"
    assert 0 < r.ttl(k) <= 100
    assert r.getex(k, persist=True) == "10!!"
    assert r.ttl(k) == -1
    s = ns + "s"
    r.sadd(s, "a", "b", "c")
    assert r.smismember(s, ["a", "x"]) == [1, 0]
    assert r.srandmember(s) in ("a", "b", "c")
    assert sorted(r.srandmember(s, 2)) in (["a", "b"], ["a", "c"], ["b", "c"])
    assert len(r.srandmember(s, -5)) == 5
    popped = r.spop(s, 2)
    assert len(popped) == 2 and set(popped) <= {"a", "b", "c"}
    assert r.scard(s) == 1
    cursor, members = r.sscan(s, 0)
    assert cursor == 0 and len(members) == 1
    assert r.spop(s) in ("a", "b", "c")
    assert r.exists(s) == 0


def test_a_value_over_the_limit_is_answered_and_the_connection_serves_on(r, ns):
    """A 4 MB value is over proto-max-bulk-len (1 MiB): the replica answers an error and the
    same connection goes on serving."""
    k = ns + "big"
    limit = int(r.config_get("proto-max-bulk-len")["proto-max-bulk-len"])
    value = "x" * (4 * 1000 * 1000)
    assert len(value) > limit
    with pytest.raises(redis.ResponseError) as e:
        r.set(k, value)
    assert error_text(e) == "value exceeds the configured size limit"
    with pytest.raises(redis.ResponseError) as e:
        r.hset(k, "f", value)
    assert error_text(e) == "value exceeds the configured size limit"
    assert r.exists(k) == 0
    assert r.set(k, "small") is True
    assert r.get(k) == "small"


# --- pipelining -----------------------------------------------------------------------------


def test_pipeline_of_1000_incrs(r, ns):
    k = ns + "counter"
    pipe = r.pipeline(transaction=False)
    for _ in range(1000):
        pipe.incr(k)
    results = pipe.execute()
    assert results == list(range(1, 1001))
    assert r.get(k) == "1000"


def test_pipeline_with_errors_keeps_order(r, ns):
    pipe = r.pipeline(transaction=False)
    pipe.set(ns + "a", "x")
    pipe.incr(ns + "a")
    pipe.get(ns + "a")
    pipe.sadd(ns + "s", "m")
    pipe.get(ns + "s")
    pipe.incr(ns + "n")
    results = pipe.execute(raise_on_error=False)
    assert results[0] is True
    assert isinstance(results[1], redis.ResponseError)
    assert results[2] == "x"
    assert results[3] == 1
    assert isinstance(results[4], redis.ResponseError)
    assert results[5] == 1


# --- across replicas ------------------------------------------------------------------------


def test_reads_through_any_replica_see_writes_through_another(rs, ns):
    for i in range(60):
        k = f"{ns}{i}"
        rs[i % 3].set(k, f"v{i}")
        for c in rs:
            assert c.get(k) == f"v{i}"
        rs[(i + 1) % 3].set(k, f"w{i}")
        for c in rs:
            assert c.get(k) == f"w{i}"
        assert rs[(i + 2) % 3].delete(k) == 1
        for c in rs:
            assert c.get(k) is None
    s = ns + "set"
    for i, c in enumerate(rs):
        c.sadd(s, f"m{i}")
        assert {x.smembers(s) == {f"m{j}" for j in range(i + 1)} for x in rs} == {True}


def test_counter_written_through_all_replicas(rs, ns):
    k = ns + "counter"
    for i in range(300):
        assert rs[i % 3].incr(k) == i + 1
    assert [c.get(k) for c in rs] == ["300"] * 3


def _retrying(call, attempts=50):
    """Retries only TRYAGAIN (documented as not applied; safe to retry)."""
    for _ in range(attempts):
        try:
            return call()
        except redis.ResponseError as e:
            if not str(e).startswith("TRYAGAIN"):
                raise
            time.sleep(0.01)
    raise AssertionError("still TRYAGAIN after retries")


def test_concurrent_incrs_through_all_replicas(addresses, protocol, ns):
    k = ns + "counter"
    threads_n, per_thread = 9, 100
    seen: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def work(i):
        c = connect(addresses[i % 3], protocol)
        try:
            for _ in range(per_thread):
                v = _retrying(lambda: c.incr(k))
                with lock:
                    seen.append(v)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)
        finally:
            c.close()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(threads_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    total = threads_n * per_thread
    # Exactly once: every acknowledged increment has its own value, and they are 1..N.
    assert sorted(seen) == list(range(1, total + 1))
    for a in addresses:
        c = connect(a, protocol)
        assert c.get(k) == str(total)
        c.close()


def test_concurrent_set_nx_has_one_winner(addresses, protocol, ns):
    k = ns + "k"
    results: dict[int, object] = {}
    barrier = threading.Barrier(12)

    def work(i):
        c = connect(addresses[i % 3], protocol)
        try:
            barrier.wait()
            results[i] = _retrying(lambda: c.set(k, f"owner-{i}", nx=True))
        except BaseException as e:  # noqa: BLE001
            results[i] = e
        finally:
            c.close()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    winners = [i for i, v in results.items() if v is True]
    assert len(results) == 12
    assert all(v is True or v is None for v in results.values()), results
    assert len(winners) == 1
    c = connect(addresses[0], protocol)
    assert c.get(k) == f"owner-{winners[0]}"
    c.close()


def test_concurrent_lock_acquire_has_one_holder(addresses, protocol, ns):
    k = ns + "lock"
    results: dict[int, object] = {}
    barrier = threading.Barrier(12)

    def work(i):
        c = connect(addresses[i % 3], protocol)
        try:
            barrier.wait()
            results[i] = _retrying(lambda: c.execute_command("LOCK.ACQUIRE", k, f"o{i}", 30000))
        except BaseException as e:  # noqa: BLE001
            results[i] = e
        finally:
            c.close()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    holders = [i for i, v in results.items() if isinstance(v, int)]
    assert all(v is None or isinstance(v, int) for v in results.values()), results
    assert len(holders) == 1
    c = connect(addresses[1], protocol)
    assert c.execute_command("LOCK.RELEASE", k, f"o{holders[0]}") == 1
    c.close()


# --- server and connection commands -----------------------------------------------------------


def test_client_setname_getname(r):
    assert r.client_getname() is None
    assert r.client_setname("logless-client-test") is True
    assert r.client_getname() == "logless-client-test"
    assert r.client_info()["name"] == "logless-client-test"
    with pytest.raises(redis.ResponseError) as e:
        r.client_setname("has space")
    assert error_text(e) == "Client names cannot contain spaces, newlines or special characters."
    assert r.client_getname() == "logless-client-test"
    assert r.client_setname("") is True
    assert r.client_getname() is None


def test_client_name_from_constructor(addresses, protocol):
    c = connect(addresses[2], protocol, client_name="named-at-connect")
    assert c.client_getname() == "named-at-connect"
    c.close()


@pytest.mark.parametrize("proto", [
    2,
    3,
], ids=["resp2", "resp3"])
def test_connect_with_username_and_password(addresses, proto):
    """Redis's default user has no password and accepts any; clients configured with
    credentials must still connect."""
    c = connect(addresses[0], proto, username="default", password="secret")
    try:
        assert c.ping() is True
    finally:
        c.close()


def test_client_id(r):
    cid = r.client_id()
    assert isinstance(cid, int) and cid > 0
    assert r.client_info()["id"] == cid


def test_select(r, addresses, protocol):
    assert r.execute_command("SELECT", 0) in (True, "OK")
    with pytest.raises(redis.ResponseError) as e:
        r.execute_command("SELECT", 1)
    assert error_text(e).startswith("DB index is out of range")
    with pytest.raises(redis.ResponseError) as e:
        r.execute_command("SELECT", "x")
    assert error_text(e) == NOT_INTEGER
    c = connect(addresses[0], protocol, db=0)
    assert c.ping() is True
    c.close()


def test_info(r, ns):
    r.set(ns + "k", "v")
    info = r.info()
    assert info["redis_version"]
    assert info["redis_mode"] == "standalone"
    assert "connected_clients" in info
    assert "db0" in info
    server = r.info("server")
    assert server["redis_version"] and "tcp_port" in server
    assert "connected_clients" not in server
    keyspace = r.info("keyspace")
    assert keyspace["db0"]["keys"] >= 1
    replication = r.info("replication")
    assert replication["role"] == "master"
    assert replication["logless_replicas"] == 3
    assert replication["logless_healthy"] == 1
    everything = r.info("everything")
    assert {"redis_version", "total_commands_processed", "db0"} <= set(everything)
    # Per-command figures of this replica, in Redis's words.
    stats = r.info("commandstats")
    assert stats["cmdstat_set"]["calls"] >= 1
    assert {"usec", "usec_per_call", "failed_calls"} <= set(stats["cmdstat_set"])
    assert "cmdstat_set" not in r.info()


def test_dbsize(r, ns):
    before = r.dbsize()
    assert isinstance(before, int)
    for i in range(5):
        r.set(f"{ns}{i}", "v")
    # DBSIZE counts this replica's copy, which may lag a write acknowledged by a quorum
    # without it (documented), so allow it a moment.
    deadline = time.monotonic() + 5
    while r.dbsize() < before + 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert r.dbsize() >= before + 5
    with pytest.raises(redis.ResponseError) as e:
        r.execute_command("DBSIZE", "extra")
    assert error_text(e) == "wrong number of arguments for 'dbsize' command"


def test_config_get(r):
    everything = r.config_get("*")
    assert everything["databases"] == "1"
    assert int(everything["maxclients"]) > 0
    assert r.config_get("save") == {"save": ""}
    assert r.config_get("appendonly") == {"appendonly": "no"}
    assert r.config_get("MAXCLIENTS") == {"maxclients": everything["maxclients"]}
    assert r.config_get("no-such-parameter") == {}
    assert set(r.config_get("logless-*")) >= {"logless-durability", "logless-shards"}
    assert "hash-max-listpack-entries" in everything


def test_config_set(r, ns):
    started = r.config_get("proto-max-bulk-len")["proto-max-bulk-len"]
    assert r.config_set("proto-max-bulk-len", 100) is True
    try:
        with pytest.raises(redis.ResponseError) as e:
            r.set(ns + "big", "x" * 200)
        assert "exceeds" in error_text(e)
    finally:
        assert r.config_set("proto-max-bulk-len", started) is True
    assert r.set(ns + "big", "x" * 200) is True
    # Redis parameters that mean nothing here are accepted and ignored.
    assert r.config_set("hash-max-listpack-entries", 512) is True
    assert r.config_set("maxmemory-policy", "allkeys-lru") is True
    with pytest.raises(redis.ResponseError) as e:
        r.config_set("no-such-parameter", 1)
    assert "Unknown option" in error_text(e)
    with pytest.raises(redis.ResponseError) as e:
        r.config_set("logless-shards", 4)
    assert "immutable" in error_text(e)


def test_scan_iter_keys_and_randomkey(r, rs, ns):
    """SCAN and KEYS list this replica's copy of the keyspace: each replica's copy catches up
    with the writes of the others."""
    names = {f"{ns}{i}" for i in range(40)}
    for name in names:
        r.set(name, "v")
    r.hset(ns + "h", "f", "v")
    for client in rs:
        deadline = time.monotonic() + 10
        while set(client.keys(ns + "*")) != names | {ns + "h"}:
            assert time.monotonic() < deadline, "every replica's copy has the keys"
            time.sleep(0.05)
        assert set(client.scan_iter(match=ns + "*", count=7)) == names | {ns + "h"}
        assert list(client.scan_iter(match=ns + "*", _type="hash")) == [ns + "h"]
    assert r.randomkey() is not None
    with pytest.raises(redis.ResponseError) as e:
        r.scan(cursor=0, _type="widget")
    assert "unknown type name" in error_text(e)


def test_flushall(r, rs, ns):
    for i in range(20):
        r.set(f"{ns}{i}", i)
    assert r.flushall() is True
    assert r.get(ns + "0") is None
    # DBSIZE and KEYS read this replica's copy: a DEL decided by a quorum that left a copy out
    # shows there late (node/src/admin.rs), on the replica that ran FLUSHALL too.
    for client in [r, *rs]:
        deadline = time.monotonic() + 10
        while client.dbsize() or client.keys("*"):
            assert time.monotonic() < deadline, "every replica's copy empties"
            time.sleep(0.05)
    assert r.flushdb(asynchronous=True) is True


def test_time(r):
    seconds, micros = r.time()
    assert abs(seconds - time.time()) < 60
    assert 0 <= micros < 1_000_000


def test_client_list_and_kill(r, addresses, protocol):
    victim = connect(addresses[0], protocol)
    victim.client_setname("victim")
    victim_id = victim.client_id()
    listed = {c["id"]: c for c in r.client_list()}
    assert listed[str(victim_id)]["name"] == "victim"
    assert str(r.client_id()) in listed
    assert r.client_kill_filter(_id=victim_id) == 1
    assert str(victim_id) not in {c["id"] for c in r.client_list()}
    # The victim's connection is closed: its next command fails, or redis-py reconnects.
    try:
        assert victim.client_id() != victim_id
    except redis.ConnectionError:
        pass
    other = connect(addresses[0], protocol)
    other_id = other.client_id()
    address = r.client_list(client_id=[other_id])[0]["addr"]
    assert r.client_kill(address) is True
    with pytest.raises(redis.ResponseError) as e:
        r.client_kill(address)
    assert "No such client" in error_text(e)
    assert r.client_kill_filter(_id=r.client_id()) == 0, "SKIPME yes by default"


def test_command_introspection(r):
    commands = r.command()
    assert r.command_count() == len(commands) >= 40
    for name in ("get", "set", "delex", "digest", "lock.acquire", "lock.release", "dbsize"):
        assert name in commands
    assert commands["get"]["arity"] == 2
    assert "readonly" in commands["get"]["flags"]
    assert commands["del"]["last_key_pos"] == -1


def test_ttl_commands(r, ns):
    k, p, s = ns + "ttl", ns + "plain", ns + "set"
    assert r.setex(k, 100, "v") is True
    assert 99 <= r.ttl(k) <= 100
    assert 99_000 <= r.pttl(k) <= 100_000
    assert r.set(p, "x") is True
    assert r.ttl(p) == -1
    assert r.ttl(ns + "absent") == -2
    assert r.expire(p, 50) is True
    assert 49 <= r.ttl(p) <= 50
    assert r.persist(p) is True
    assert r.ttl(p) == -1
    assert r.getset(p, "y") in (b"x", "x")
    assert r.strlen(p) == 1
    assert r.append(p, "zz") == 3
    assert r.getdel(p) in (b"yzz", "yzz")
    assert r.exists(p) == 0
    r.sadd(s, "m")
    assert r.type(s) in (b"set", "set")
    assert r.type(k) in (b"string", "string")
    assert r.unlink(k, s) == 2
