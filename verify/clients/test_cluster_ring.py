"""redis-py's RedisCluster against a ring in cluster mode whose membership changes
(`logless up --nodes 4 --replication 3 --cluster-enabled`, then `logless cluster remove 4`;
docs/ring.md §4 "Built: cluster mode follows the stages").

A client keeps the slot map it loaded until a node answers MOVED: after the change the nodes
redirect by the new configuration, and the client follows, away from the removed node.
(Adding node 4 back, once it has dropped the registers of the slots it left, is tested by
logless/tests/ring_cluster.rs, not here.)
"""
from __future__ import annotations

import subprocess
import time

import pytest
import redis
from redis.cluster import RedisCluster

import conftest

NODES = 4
TIMEOUT_S = 60


@pytest.fixture(scope="module")
def ring(request):
    """A ring of four nodes, each key on three, in cluster mode."""
    yield from conftest.own_cluster(
        request, "logless-clients-ring-", ("--replication", "3", "--cluster-enabled"), NODES)


def change(ring, *args):
    """`logless cluster <args>`, asked of the first node."""
    http = f"{conftest.HOST}:{ring.base_port + conftest.HTTP_OFFSET}"
    proc = subprocess.run([str(conftest.logless_bin()), "cluster", "--http", http, *args],
                          capture_output=True, timeout=TIMEOUT_S)
    assert proc.returncode == 0, (args, proc.stdout.decode(), proc.stderr.decode())


def empty_every_copy(ring, client):
    """Deletes, through `client`, every key any node's copy shows, until none shows one."""
    plains = [redis.Redis(host=h, port=p, decode_responses=True) for h, p in ring.addresses]
    try:
        deadline = time.monotonic() + 20
        while True:
            shown = set().union(*(set(plain.keys("*")) for plain in plains))
            if not shown:
                return
            for key in shown:
                client.delete(key)
            assert time.monotonic() < deadline, f"copies still show {shown}"
            time.sleep(0.1)
    finally:
        for plain in plains:
            plain.close()


def test_redis_py_follows_a_node_removed(ring):
    host, port = ring.addresses[1]
    rc = RedisCluster(host=host, port=port, decode_responses=True, socket_timeout=20)
    fourth = ring.ports[3]
    try:
        keys = [f"ring:{i}" for i in range(120)]
        # Each node is the first replica of some slots: node 4 serves some keys.
        assert fourth in {rc.get_node_from_key(k).port for k in keys}
        empty_every_copy(ring, rc)

        change(ring, "remove", "4")
        # The client's map still names node 4: it is redirected, and every key is served.
        for i, key in enumerate(keys):
            assert rc.set(key, i)
        assert [rc.get(k) for k in keys] == [str(i) for i in range(len(keys))]
        rc.nodes_manager.initialize()
        assert fourth not in {rc.get_node_from_key(k).port for k in keys}

    finally:
        rc.close()
