"""Cluster-aware clients against a ring in cluster mode whose membership changes
(`logless up --nodes 4 --replication 3 --cluster-enabled`; docs/ring.md §4 "Built: cluster
mode follows the stages" and "Operating").

The module's ring goes through three changes, in the order of the tests: `logless cluster
remove 4` (epoch 2), `replace 3 4` (epoch 3: node 4, which has dropped the registers of the
slots it left, takes node 3's place) and `add 3` (epoch 4, once node 3 has dropped its copy).
Each change runs with keys in the moving slots (the data mover writes them through, so the
ring stays a while in the joint stage) and while a thread writes through its own
`RedisCluster`. After each, every key written before it and every write acknowledged during it
reads back through a `RedisCluster` that kept the slot map it loaded before the change: the
client is redirected (`MOVED`) to each moved slot's new first replica and follows, so its map
ends as the ring's `CLUSTER SLOTS`. `redis-cli -c` follows the `MOVED` of a key whose slot
moved and reads its value. The tests depend on each other's changes, so they run in this
order only (10-30 s together on a loaded 2-core machine).
"""
from __future__ import annotations

import collections
import json
import logging
import subprocess
import threading
import time
import urllib.request

import pytest
import redis
from redis.cluster import RedisCluster

import conftest

NODES = 4
TIMEOUT_S = 60
# Keys written before each change.
KEYS = 120
# How long the writer goes on after a change has returned.
AFTER_CHANGE_S = 0.5


@pytest.fixture(scope="module")
def ring(request):
    """A ring of four nodes, each key on three, in cluster mode."""
    yield from conftest.own_cluster(
        request, "logless-clients-ring-", ("--replication", "3", "--cluster-enabled"), NODES)


@pytest.fixture(scope="module")
def rc(ring):
    """One `RedisCluster`, started from node 2, for the whole module: its slot map is always
    the one it had before the change under test."""
    host, port = ring.addresses[1]
    client = RedisCluster(host=host, port=port, decode_responses=True, socket_timeout=20)
    yield client
    client.close()


def change(ring, *args):
    """`logless cluster <args>`, asked of the first node."""
    http = f"{conftest.HOST}:{ring.base_port + conftest.HTTP_OFFSET}"
    proc = subprocess.run([str(conftest.logless_bin()), "cluster", "--http", http, *args],
                          capture_output=True, timeout=TIMEOUT_S)
    assert proc.returncode == 0, (args, proc.stdout.decode(), proc.stderr.decode())
    return proc.stdout.decode()


def first_replicas(ring, node: int = 0) -> dict[int, int]:
    """Each slot's first replica's client port, as the node's `CLUSTER SLOTS` shows it."""
    host, port = ring.addresses[node]
    with redis.Redis(host=host, port=port) as plain:
        ranges = plain.execute_command("CLUSTER SLOTS")
    first = {}
    for entry in ranges:
        start, end, primary = entry[0], entry[1], entry[2]
        for slot in range(start, end + 1):
            first[slot] = int(primary[1])
    assert len(first) == 16384, "every slot is covered"
    return first


def ring_status(ring, node: int) -> dict:
    """The `ring` part of node `node`'s (0-based) `/status`."""
    port = ring.base_port + conftest.HTTP_OFFSET + node
    with urllib.request.urlopen(f"http://{conftest.HOST}:{port}/status", timeout=10) as answer:
        return json.load(answer)["ring"]


def wait_for_stage(ring, stage: str):
    """Waits until every node's map is of `stage` (each node reports it in `/status`)."""
    deadline = time.monotonic() + 20
    while True:
        stages = [ring_status(ring, i)["stage"]
                  for i in range(len(ring.addresses))]
        if all(s == stage for s in stages):
            return
        assert time.monotonic() < deadline, f"nodes at {stages}, not all at {stage}"
        time.sleep(0.1)


class Redirections(logging.Handler):
    """The last redirections (`MOVED`, `ASK`, `TRYAGAIN`) redis-py's cluster client logged in
    one thread, to name them when a command fails."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.thread = threading.get_ident()
        self.last = collections.deque(maxlen=20)

    def emit(self, record):
        if record.thread == self.thread:
            self.last.append(f"{record.created:.3f} {record.getMessage()[:200]}")


class Writer(threading.Thread):
    """Writes `<prefix><n>` = n for n = 0, 1, … through its own `RedisCluster` until stopped,
    keeping the writes acknowledged and the errors."""

    def __init__(self, ring, prefix: str):
        super().__init__(daemon=True)
        host, port = ring.addresses[2]
        self.client = RedisCluster(host=host, port=port, decode_responses=True,
                                   socket_timeout=20)
        self.prefix = prefix
        self.acked: dict[str, str] = {}
        self.errors: list[str] = []
        self.stop = threading.Event()

    def run(self):
        n = 0
        logger = logging.getLogger("redis.cluster")
        redirections = Redirections()
        level = logger.level
        logger.addHandler(redirections)
        logger.setLevel(logging.DEBUG)
        try:
            while not self.stop.is_set():
                key = f"{self.prefix}{n}"
                try:
                    if self.client.set(key, n):
                        self.acked[key] = str(n)
                except redis.RedisError as e:
                    self.errors.append(f"{key}: {type(e).__name__} {e} at {time.time():.3f}, "
                                       f"after {list(redirections.last)}")
                n += 1
        finally:
            logger.removeHandler(redirections)
            logger.setLevel(level)
            self.client.close()

    def until(self, count: int):
        deadline = time.monotonic() + 10
        while len(self.acked) < count:
            assert self.is_alive() and time.monotonic() < deadline, (
                f"{len(self.acked)} writes acknowledged, errors {self.errors[:5]}")
            time.sleep(0.01)


def change_under_writes(ring, rc, name: str, args: tuple[str, ...], stage: str):
    """Writes `KEYS` keys through `rc`, then runs the change `args` while a `Writer` writes,
    and checks that every key written before and every write acknowledged during it reads back
    through `rc` (whose map is from before the change), which follows the `MOVED`s to the
    moved slots' new first replicas: afterwards its map is the ring's."""
    before = {f"{name}:before:{i}": str(i) for i in range(KEYS)}
    for key, value in before.items():
        assert rc.set(key, value)
    old = first_replicas(ring)
    # The client's map is the ring's before the change.
    assert all(rc.get_node_from_key(k).port == old[rc.keyslot(k)] for k in before)

    writer = Writer(ring, f"{name}:during:")
    writer.start()
    try:
        writer.until(20)
        started = len(writer.acked)
        out = change(ring, *args)
        done = len(writer.acked)
        time.sleep(AFTER_CHANGE_S)
    finally:
        writer.stop.set()
        writer.join(timeout=30)
    assert not writer.is_alive()
    wait_for_stage(ring, stage)
    # Writes went on while the change ran (the joint stage serves).
    assert done > started, (out, started, done)
    assert not writer.errors, writer.errors[:10]

    new = first_replicas(ring)
    moved = [k for k in before if old[rc.keyslot(k)] != new[rc.keyslot(k)]]
    assert moved, "the change moves the first replica of some keys' slots"
    # The client's map is still the old one for them; reading every key follows the MOVED.
    assert all(rc.get_node_from_key(k).port == old[rc.keyslot(k)] for k in moved)
    expected = before | writer.acked
    got = {k: rc.get(k) for k in expected}
    assert got == expected, {k: (v, got[k]) for k, v in expected.items() if got[k] != v}
    assert all(rc.get_node_from_key(k).port == new[rc.keyslot(k)] for k in expected)
    return moved, new


def redis_cli(*args: str) -> str:
    proc = subprocess.run(["redis-cli", *args], capture_output=True, timeout=TIMEOUT_S)
    assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
    return proc.stdout.decode()


def redis_cli_follows(ring, key: str, value: str, new: dict[int, int], old_port: int):
    """`redis-cli` asked at `old_port`, the old first replica of `key`'s slot: without `-c` it
    shows the `MOVED` to the new first replica, with `-c` it follows it and reads `value`,
    and writes through the redirection too."""
    host = conftest.HOST
    slot = int(redis_cli("-h", host, "-p", str(old_port), "cluster", "keyslot", key))
    moved = redis_cli("-h", host, "-p", str(old_port), "get", key).strip()
    assert moved == f"MOVED {slot} {host}:{new[slot]}", moved
    assert redis_cli("-c", "-h", host, "-p", str(old_port), "get", key).strip() == value
    assert redis_cli("-c", "-h", host, "-p", str(old_port), "set", key, value + "!").strip() \
        == "OK"
    assert redis_cli("-h", host, "-p", str(new[slot]), "get", key).strip() == value + "!"


def test_a_node_removed(ring, rc):
    fourth = ring.ports[3]
    old = first_replicas(ring)
    # Each node is the first replica of some slots: node 4 serves some keys.
    assert fourth in set(old.values())
    moved, new = change_under_writes(ring, rc, "remove", ("remove", "4"), "Stable(2)")
    assert fourth not in set(new.values())
    assert fourth not in {rc.get_node_from_key(k).port for k in moved}
    # redis-cli -c at node 4, which holds no slot now.
    key = next(k for k in moved if old[rc.keyslot(k)] == fourth)
    redis_cli_follows(ring, key, key.rsplit(":", 1)[1], new, fourth)


def wait_dropped(ring, node: int):
    """Waits until node `node` (0-based) has no register left of slots it does not
    replicate (`/status` `ring.registers_to_drop`)."""
    deadline = time.monotonic() + 20
    while (left := ring_status(ring, node)["registers_to_drop"]):
        assert time.monotonic() < deadline, f"node {node + 1} still holds {left} to drop"
        time.sleep(0.1)


def test_a_node_replaced_by_the_removed_one(ring, rc):
    third, fourth = ring.ports[2], ring.ports[3]
    wait_dropped(ring, 3)
    old = first_replicas(ring)
    moved, new = change_under_writes(ring, rc, "replace", ("replace", "3", "4"), "Stable(3)")
    assert third not in set(new.values()) and fourth in set(new.values())
    key = next(k for k in moved if old[rc.keyslot(k)] == third)
    redis_cli_follows(ring, key, key.rsplit(":", 1)[1], new, third)


def test_a_node_added_back(ring, rc):
    third = ring.ports[2]
    wait_dropped(ring, 2)
    old = first_replicas(ring)
    moved, new = change_under_writes(ring, rc, "add", ("add", "3"), "Stable(4)")
    # The client is redirected to node 3 for the slots it is first replica of again.
    to_third = [k for k in moved if new[rc.keyslot(k)] == third]
    assert to_third, "node 3 is the first replica of some moved keys' slots"
    assert all(rc.get_node_from_key(k).port == third for k in to_third)
    key = to_third[0]
    redis_cli_follows(ring, key, key.rsplit(":", 1)[1], new, old[rc.keyslot(key)])
