"""Bad input on raw sockets: malformed RESP, oversized requests, bad commands, random bytes,
a TLS handshake on the plain port (TLS garbage on the TLS port is in test_tls.py).

For each case: the error reply (a line starting with `-`), for protocol errors that the server
closes that connection, and afterwards that the attacked replica still serves a fresh
connection (PING, SET, GET) and that keys stored before are intact on every replica.
"""
from __future__ import annotations

import random
import socket
import ssl
import threading
import time
import uuid

import pytest

from rawresp import Raw, encode

PROTOCOL_ERRORS = [
    ("multibulk-length-not-a-number", b"*abc\r\n", "invalid multibulk length"),
    ("multibulk-length-too-long", b"*99999999999999999999\r\n", "invalid multibulk length"),
    ("multibulk-length-over-limit", b"*1048577\r\n", "invalid multibulk length"),
    ("negative-bulk-length", b"*1\r\n$-5\r\n", "invalid bulk length"),
    ("bulk-length-leading-zero", b"*1\r\n$04\r\nPING\r\n", "invalid bulk length"),
    ("bulk-length-plus-sign", b"*1\r\n$+4\r\nPING\r\n", "invalid bulk length"),
    ("bulk-length-garbage", b"*1\r\n$4x\r\nPING\r\n", "invalid bulk length"),
    ("oversized-bulk-length", b"*2\r\n$3\r\nGET\r\n$999999999999\r\n", "invalid bulk length"),
    # 64 MiB (the largest value_bytes_max) plus 1024 bytes of room is the most the parser
    # reads; a longer bulk breaks the protocol. Shorter ones over proto-max-bulk-len (1 MiB)
    # are read and answered with an error (test_oversized_value_within_the_bulk_limit_...).
    ("bulk-length-just-over-limit", b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$67109889\r\n",
     "invalid bulk length"),
    ("missing-crlf-after-bulk", b"*1\r\n$4\r\nPINGxx", "expected CRLF after bulk argument"),
    ("wrong-bytes-after-last-bulk", b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nvX\r\n",
     "expected CRLF after bulk argument"),
    ("argument-not-a-bulk", b"*2\r\n:1\r\n", "expected '$', got ':'"),
    ("argument-not-a-bulk-unprintable", b"*1\r\n\x01\r\n", "expected '$', got '\\x01'"),
    ("oversized-inline-without-newline", b"x" * (64 * 1024 + 4000), "too big inline request"),
    ("oversized-inline-line", b"SET k " + b"v" * (70 * 1024) + b"\r\n", "too big inline request"),
    ("unbalanced-double-quote", b'SET k "abc\r\n', "unbalanced quotes in request"),
    ("unbalanced-single-quote", b"SET k 'abc\r\n", "unbalanced quotes in request"),
    ("closing-quote-followed-by-text", b'SET "k"v x\r\n', "unbalanced quotes in request"),
]

COMMAND_ERRORS = [
    ("unknown-command", encode("NOSUCHCMD", "a", "b"),
     "-ERR unknown command 'NOSUCHCMD', with args beginning with: 'a' 'b' "),
    ("unknown-command-inline", b"nosuchcmd x\r\n",
     "-ERR unknown command 'nosuchcmd', with args beginning with: 'x' "),
    ("wrong-arity-get", encode("GET"), "-ERR wrong number of arguments for 'get' command"),
    ("wrong-arity-set-inline", b"SET onlykey\r\n",
     "-ERR wrong number of arguments for 'set' command"),
    ("wrong-arity-incrby", encode("INCRBY", "k"),
     "-ERR wrong number of arguments for 'incrby' command"),
    ("wrong-arity-client-getname", encode("CLIENT", "GETNAME", "x"),
     "-ERR wrong number of arguments for 'client|getname' command"),
    ("not-an-integer", encode("INCRBY", "k", "1.5"),
     "-ERR value is not an integer or out of range"),
    ("syntax-error", encode("SET", "k", "v", "NX", "XX"), "-ERR syntax error"),
    ("empty-command-name", encode(""), "-ERR unknown command '', with args beginning with: "),
]


@pytest.fixture(scope="module")
def seeded(addresses):
    """Keys of every kind stored before the attacks; the test checks them after each."""
    ns = f"bad:{uuid.uuid4().hex}:"
    expected = {}
    with Raw(addresses[0]) as c:
        assert c.command("SET", ns + "str", "value \x00 with bytes") == "OK"
        expected[ns + "str"] = ("GET", b"value \x00 with bytes")
        assert c.command("INCRBY", ns + "int", 42) == 42
        expected[ns + "int"] = ("GET", b"42")
        assert c.command("SADD", ns + "set", "a", "b") == 2
        expected[ns + "set"] = ("SCARD", 2)
        token = c.command("LOCK.ACQUIRE", ns + "lock", "owner", 600000)
        assert isinstance(token, int)
        expected[ns + "lock"] = ("LOCK.ACQUIRE", token)  # the holder re-acquires: same token
    return {"ns": ns, "expected": expected}


def assert_serves(addresses, seeded, attacked=0):
    """The attacked replica serves a fresh connection, and the seeded keys are intact on
    every replica."""
    ns = seeded["ns"]
    probe = f"{ns}probe:{uuid.uuid4().hex}"
    with Raw(addresses[attacked]) as c:
        assert c.command("PING") == "PONG"
        assert c.command("SET", probe, "ok") == "OK"
        assert c.command("GET", probe) == b"ok"
    for addr in addresses:
        with Raw(addr) as c:
            assert c.command("GET", probe) == b"ok"
            for key, (cmd, want) in seeded["expected"].items():
                args = (key, "owner", 600000) if cmd == "LOCK.ACQUIRE" else (key,)
                assert c.command(cmd, *args) == want, (addr, key)


def protocol_errors(addr) -> int:
    with Raw(addr) as c:
        info = c.command("INFO", "stats").decode()
    return int(info.split("logless_protocol_errors:")[1].split("\r\n")[0])


@pytest.mark.parametrize("payload,message", [c[1:] for c in PROTOCOL_ERRORS],
                         ids=[c[0] for c in PROTOCOL_ERRORS])
def test_protocol_error_closes_the_connection(addresses, seeded, payload, message):
    before = protocol_errors(addresses[0])
    with Raw(addresses[0]) as c:
        c.send(payload)
        reply = c.reply()
        assert isinstance(reply, str) and reply.startswith("-"), reply
        assert reply == f"-ERR Protocol error: {message}"
        assert c.wait_closed(), "the server kept the connection open after a protocol error"
        assert c.buf == b""
    assert protocol_errors(addresses[0]) >= before + 1
    assert_serves(addresses, seeded)


def test_protocol_error_after_valid_requests(addresses, seeded):
    """Requests before the bad one are answered in order, then the error, then the close."""
    key = f"{seeded['ns']}before-error"
    with Raw(addresses[1]) as c:
        c.send(encode("SET", key, "1") + b"PING\r\n" + encode("INCR", key) + b"*x\r\n"
               + encode("SET", key, "never"))
        assert c.reply() == "OK"
        assert c.reply() == "PONG"
        assert c.reply() == 2
        assert c.reply() == "-ERR Protocol error: invalid multibulk length"
        assert c.wait_closed()
    with Raw(addresses[2]) as c:
        assert c.command("GET", key) == b"2"  # the request after the error was not run
    assert_serves(addresses, seeded, attacked=1)


@pytest.mark.parametrize("payload,message", [c[1:] for c in COMMAND_ERRORS],
                         ids=[c[0] for c in COMMAND_ERRORS])
def test_command_error_keeps_the_connection(addresses, seeded, payload, message):
    with Raw(addresses[0]) as c:
        c.send(payload)
        assert c.reply() == message
        assert c.command("PING") == "PONG"
    assert_serves(addresses, seeded)


def test_wrong_type_keeps_the_connection(addresses, seeded):
    ns = seeded["ns"]
    wrongtype = "-WRONGTYPE Operation against a key holding the wrong kind of value"
    with Raw(addresses[2]) as c:
        assert c.command("GET", ns + "set") == wrongtype
        assert c.command("INCR", ns + "set") == wrongtype
        assert c.command("SADD", ns + "str", "x") == wrongtype
        assert c.command("SMEMBERS", ns + "int") == wrongtype
        assert c.command("GET", ns + "lock") == wrongtype
        assert c.command("PING") == "PONG"
    assert_serves(addresses, seeded, attacked=2)


def test_oversized_value_within_the_bulk_limit_is_refused(addresses, seeded):
    """A value over proto-max-bulk-len that the parser still reads is refused with an error,
    and the connection stays usable: just over the limit, and 4 MB."""
    key = f"{seeded['ns']}big"
    with Raw(addresses[0]) as c:
        assert c.command("SET", key, b"x" * ((1 << 20) + 1)) == (
            "-ERR value exceeds the configured size limit")
        assert c.command("SET", key, b"x" * (4 * 1000 * 1000)) == (
            "-ERR value exceeds the configured size limit")
        assert c.command("EXISTS", key) == 0
        assert c.command("SET", "k" * 1025, "v") == "-ERR key of 1025 bytes exceeds the limit of 1024"
        assert c.command("PING") == "PONG"
    assert_serves(addresses, seeded)


def test_inline_commands_and_quoting(addresses, seeded):
    key = f"{seeded['ns']}inline"
    with Raw(addresses[0]) as c:
        c.send(f'SET {key} "a b\\x41\\n\\"" \r\n'.encode())
        assert c.reply() == "OK"
        assert c.command("GET", key) == b'a bA\n"'
        c.send(f"SET {key} 'it\\'s'\n".encode())  # LF alone ends a line too
        assert c.reply() == "OK"
        assert c.command("GET", key) == b"it's"
        c.send(b"PING hello\r\n")
        assert c.reply() == b"hello"
        c.send(b"ECHO \"\"\r\n")
        assert c.reply() == b""
    assert_serves(addresses, seeded)


def test_empty_requests_are_ignored(addresses, seeded):
    with Raw(addresses[1]) as c:
        c.send(b"\r\n\r\n*0\r\n*-1\r\n   \r\nPING\r\n")
        assert c.reply() == "PONG"
    assert_serves(addresses, seeded, attacked=1)


def test_request_split_into_single_bytes(addresses, seeded):
    key = f"{seeded['ns']}split"
    with Raw(addresses[2]) as c:
        c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for b in encode("SET", key, "x" * 50) + encode("GET", key):
            c.send(bytes([b]))
            time.sleep(0.0005)
        assert c.reply() == "OK"
        assert c.reply() == b"x" * 50
    assert_serves(addresses, seeded, attacked=2)


def test_incomplete_request_does_not_block_others(addresses, seeded):
    stalled = [Raw(addresses[0]) for _ in range(5)]
    try:
        stalled[0].send(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$100\r\nabc")  # a body that never ends
        stalled[1].send(b"*2\r\n$3\r\nGET")  # a header that never ends
        stalled[2].send(b"GET k")  # an inline line that never ends
        stalled[3].send(b"*1048576\r\n")  # many arguments announced, none sent
        assert_serves(addresses, seeded)
    finally:
        for c in stalled:
            c.close()  # a half request followed by a disconnect
    assert_serves(addresses, seeded)


def test_quit_closes_after_replying(addresses, seeded):
    key = f"{seeded['ns']}after-quit"
    with Raw(addresses[0]) as c:
        c.send(b"PING\r\nQUIT\r\n" + encode("SET", key, "v"))
        assert c.reply() == "PONG"
        assert c.reply() == "OK"
        assert c.wait_closed()
    with Raw(addresses[0]) as c:
        assert c.command("EXISTS", key) == 0  # requests after QUIT are not run
    assert_serves(addresses, seeded)


def test_resp3_wire_types_and_reset(addresses, seeded):
    ns = seeded["ns"]
    with Raw(addresses[1]) as c:
        c.send(b"HELLO 3\r\n")
        hello = c.reply_bytes()
        assert hello.startswith(b"%8\r\n$6\r\nserver\r\n$5\r\nredis\r\n")
        assert b"$5\r\nproto\r\n:3\r\n" in hello
        c.send(encode("SMEMBERS", ns + "set"))
        assert c.reply_bytes() == b"~2\r\n$1\r\na\r\n$1\r\nb\r\n"  # a RESP3 set
        c.send(encode("GET", ns + "missing"))
        assert c.reply_bytes() == b"_\r\n"  # the RESP3 null
        c.send(encode("CONFIG", "GET", "databases"))
        assert c.reply_bytes() == b"%1\r\n$9\r\ndatabases\r\n$1\r\n1\r\n"  # a map
        assert c.command("RESET") == "RESET"
        c.send(encode("GET", ns + "missing"))
        assert c.reply_bytes() == b"$-1\r\n"  # back to RESP2
        c.send(encode("SMEMBERS", ns + "set"))
        assert c.reply_bytes() == b"*2\r\n$1\r\na\r\n$1\r\nb\r\n"
    assert_serves(addresses, seeded, attacked=1)


def test_hello_errors(addresses, seeded):
    with Raw(addresses[2]) as c:
        assert c.command("HELLO", "4").startswith("-NOPROTO")
        assert c.command("HELLO", "abc") == (
            "-ERR Protocol version is not an integer or out of range")
        assert c.command("HELLO", "3", "BOGUS") == "-ERR Syntax error in HELLO option 'BOGUS'"
        assert c.command("PING") == "PONG"  # still RESP2
    assert_serves(addresses, seeded, attacked=2)


def test_a_tls_handshake_on_the_plain_port(addresses, seeded):
    """A client that speaks TLS to the plain port (its ClientHello is garbage to RESP) fails
    its handshake without harming anyone else."""
    context = ssl.create_default_context()
    with socket.create_connection(addresses[1], timeout=3) as sock:
        with pytest.raises((ssl.SSLError, OSError)):
            context.wrap_socket(sock, server_hostname=addresses[1][0])
    assert_serves(addresses, seeded, attacked=1)


def test_many_connections_at_once(addresses, seeded):
    conns = [Raw(addresses[i % 3]) for i in range(300)]
    try:
        for c in conns:
            c.send(b"PING\r\n")
        for c in conns:
            assert c.reply() == "PONG"
    finally:
        for c in conns:
            c.close()
    assert_serves(addresses, seeded)


def _fuzz_payloads(seed: int, count: int):
    rng = random.Random(seed)
    valid = [
        encode("SET", f"fuzz:{seed}:k", "value"),
        encode("GET", f"fuzz:{seed}:k"),
        encode("SADD", f"fuzz:{seed}:s", "a", "b"),
        encode("INCRBY", f"fuzz:{seed}:n", "5"),
        b"PING\r\n",
        b'ECHO "quoted \\x41"\r\n',
    ]
    alphabet = b"*$:+-_~%\r\n0123456789-\"' abcxyzSETGET\x00\xff"
    for i in range(count):
        kind = i % 3
        if kind == 0:  # random bytes
            yield bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 200)))
        elif kind == 1:  # bytes drawn from RESP's own alphabet
            yield bytes(rng.choice(alphabet) for _ in range(rng.randrange(1, 200)))
        else:  # a valid pipeline with a few mutations
            data = bytearray(b"".join(rng.choice(valid) for _ in range(rng.randrange(1, 5))))
            for _ in range(rng.randrange(1, 4)):
                pos = rng.randrange(len(data))
                op = rng.randrange(3)
                if op == 0:
                    data[pos] = rng.choice(alphabet)
                elif op == 1:
                    del data[pos]
                else:
                    data.insert(pos, rng.choice(alphabet))
            yield bytes(data)


def test_fuzzed_requests(addresses, seeded):
    """Random and mutated requests: every reply is well-formed RESP, the server never hangs
    on a closed input, and the node keeps serving."""
    seed = 20240601

    def one(payload, addr):
        with Raw(addr, timeout=10) as c:
            c.send(payload)
            try:
                c.sock.shutdown(socket.SHUT_WR)  # the server sees the end of the input
            except OSError:
                pass
            replies = []
            while True:
                try:
                    replies.append(c.reply())
                except EOFError:
                    break
            assert c.buf == b"", (payload, c.buf)
            for reply in replies:
                if isinstance(reply, str) and reply.startswith("-"):
                    assert reply[1:].split(" ")[0] in {"ERR", "WRONGTYPE", "NOPROTO"}, reply

    failures = []
    payloads = list(_fuzz_payloads(seed, 600))

    def worker(chunk, addr):
        for payload in chunk:
            try:
                one(payload, addr)
            except Exception as e:  # noqa: BLE001 - collected and reported
                failures.append((payload, repr(e)))

    threads = [threading.Thread(target=worker, args=(payloads[i::6], addresses[i % 3]))
               for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not failures, failures[:5]
    for i in range(3):
        assert_serves(addresses, seeded, attacked=i)


# Authentication bypass attempts against the cluster with a password (`secured`): nothing
# before AUTH runs, however it is sent, and nothing stored changes.

NOAUTH = "-NOAUTH Authentication required."
WRONGPASS = "-WRONGPASS invalid username-password pair or user is disabled."


@pytest.fixture(scope="module")
def guarded(secured):
    """A key stored on the secured cluster before the attempts."""
    from conftest import PASSWORD
    key = f"bad-auth:{uuid.uuid4().hex}"
    with Raw(secured.addresses[0]) as c:
        assert c.command("AUTH", PASSWORD) == "OK"
        assert c.command("SET", key, "kept") == "OK"
    return {"key": key, "password": PASSWORD, "addresses": secured.addresses}


def assert_guarded(guarded):
    """Every replica still holds the key as it was, and serves a client that logs in."""
    for addr in guarded["addresses"]:
        with Raw(addr) as c:
            assert c.command("GET", guarded["key"]) == NOAUTH
            assert c.command("AUTH", guarded["password"]) == "OK"
            assert c.command("GET", guarded["key"]) == b"kept"


def test_commands_pipelined_before_auth_do_not_run(guarded):
    key, password = guarded["key"], guarded["password"]
    with Raw(guarded["addresses"][0]) as c:
        c.send(encode("SET", key, "stolen") + encode("AUTH", password) + encode("GET", key))
        assert c.reply() == NOAUTH
        assert c.reply() == "OK"
        assert c.reply() == b"kept"
    assert_guarded(guarded)


def test_inline_and_odd_auth_requests(guarded):
    key, password = guarded["key"], guarded["password"]
    with Raw(guarded["addresses"][1]) as c:
        c.send(f"SET {key} stolen\r\n".encode())
        assert c.reply() == NOAUTH
        for attempt in [f'AUTH "{password} "\r\n', "AUTH \"\"\r\n", "auth default wrong\r\n",
                        f"AUTH DEFAULT {password}\r\n", f"AUTH {password[:-1]}\r\n",
                        f"AUTH {password}\x00\r\n"]:
            c.send(attempt.encode())
            assert c.reply() == WRONGPASS, attempt
        assert c.command("AUTH", "x" * 100_000) == WRONGPASS
        assert c.command("AUTH", "a", "b", "c").startswith("-ERR syntax error")
        assert c.command("GET", key) == NOAUTH
        c.send(f"aUtH {password}\r\n".encode())
        assert c.reply() == "OK"
        assert c.command("GET", key) == b"kept"
    assert_guarded(guarded)


def test_hello_with_wrong_credentials_changes_nothing(guarded):
    key, password = guarded["key"], guarded["password"]
    with Raw(guarded["addresses"][2]) as c:
        assert c.command("HELLO", "3").startswith("-NOAUTH HELLO must be called")
        assert c.command("HELLO", "3", "AUTH", "default", "wrong") == WRONGPASS
        assert c.command("HELLO", "3", "AUTH", "nobody", password) == WRONGPASS
        assert c.command("HELLO", "3", "SETNAME", "x", "AUTH", "default").startswith("-ERR")
        c.send(encode("GET", key))
        assert c.reply_bytes() == (NOAUTH + "\r\n").encode()  # still RESP2, still refused
        reply = c.command("HELLO", "3", "AUTH", "default", password)
        assert isinstance(reply, dict) and reply.get(b"proto") == 3, reply
        assert c.command("GET", key) == b"kept"
    assert_guarded(guarded)


def test_multi_before_auth_queues_nothing(guarded):
    key, password = guarded["key"], guarded["password"]
    with Raw(guarded["addresses"][0]) as c:
        assert c.command("MULTI") == NOAUTH
        assert c.command("SET", key, "stolen") == NOAUTH
        assert c.command("EXEC") == NOAUTH
        assert c.command("AUTH", password) == "OK"
        assert c.command("EXEC") == "-ERR EXEC without MULTI"
        assert c.command("GET", key) == b"kept"
    assert_guarded(guarded)


def test_reset_logs_out_and_other_commands_stay_refused(guarded):
    key, password = guarded["key"], guarded["password"]
    with Raw(guarded["addresses"][1]) as c:
        for args in [("CLIENT", "ID"), ("CONFIG", "GET", "*"), ("INFO",), ("ACL", "LIST"),
                     ("ECHO", "x"), ("SELECT", "0"), ("NOSUCHCOMMAND",), ("DEL", key),
                     ("COMMAND",), ("DBSIZE",)]:
            assert c.command(*args) == NOAUTH, args
        assert c.command("PING") == "PONG"
        assert c.command("AUTH", password) == "OK"
        assert c.command("RESET") == "RESET"
        assert c.command("GET", key) == NOAUTH
        assert c.command("QUIT") == "OK"
    assert_guarded(guarded)
