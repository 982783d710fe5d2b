"""Cluster-aware clients against `logless up --cluster-enabled` (Redis Cluster in the node).

Today every replica replicates every slot (docs/ring.md), so a cluster-aware client is never
redirected: what these tests check is that the clients accept logless's cluster replies
(CLUSTER SLOTS, NODES, SHARDS, INFO), route each key to the slot's first replica, and get
Redis Cluster's answers for keys of several slots (CROSSSLOT) and hash tags. The go-redis
ClusterClient test is in goredis/cluster_client_test.go.
"""
from __future__ import annotations

import shutil
import subprocess

import pytest
import redis
from redis.cluster import LoadBalancingStrategy, RedisCluster
from redis.exceptions import RedisClusterException, ResponseError

import conftest

CLI = shutil.which("redis-cli")
TIMEOUT_S = 60


@pytest.fixture(scope="module")
def clustered(request):
    """A cluster of its own, started with `logless up --cluster-enabled`."""
    yield from conftest.own_cluster(request, "logless-clients-cluster-", ("--cluster-enabled",))


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def rc(request, clustered):
    """redis-py's RedisCluster, started from the second replica (it learns the others)."""
    host, port = clustered.addresses[1]
    client = RedisCluster(host=host, port=port, protocol=request.param,
                          decode_responses=True, socket_timeout=20)
    yield client
    client.close()


def cli(port, *args, check=True):
    proc = subprocess.run([CLI, "-c", "-h", "127.0.0.1", "-p", str(port), *map(str, args)],
                          capture_output=True, timeout=TIMEOUT_S)
    if check:
        assert proc.returncode == 0, (args, proc.returncode, proc.stdout, proc.stderr)
    return proc.stdout.decode()


def test_redis_py_learns_every_replica_and_routes_each_slot_to_its_first(rc, clustered):
    ports = {port for _, port in clustered.addresses}
    assert {node.port for node in rc.get_nodes()} == ports
    assert rc.cluster_info()["cluster_state"] == "ok"
    # Every replica is the first of some slots: the client spreads its keys over all three.
    primaries = {rc.get_node_from_key(f"k{i}").port for i in range(200)}
    assert primaries == ports
    assert rc.keyslot("somekey") == 11058
    assert rc.keyslot("{user1000}.following") == rc.keyslot("{user1000}.followers")


def test_redis_py_set_get_and_a_pipeline_across_slots(rc, ns):
    keys = [f"{ns}k{i}" for i in range(50)]
    assert len({rc.keyslot(k) for k in keys}) > 40
    for i, key in enumerate(keys):
        assert rc.set(key, i)
    assert [rc.get(k) for k in keys] == [str(i) for i in range(50)]
    pipe = rc.pipeline()
    for key in keys:
        pipe.incr(key)
    pipe.get(keys[0])
    assert pipe.execute() == [i + 1 for i in range(50)] + ["1"]
    # The client splits a multi-key read by slot.
    assert rc.mget_nonatomic(keys[:10]) == [str(i + 1) for i in range(10)]
    assert rc.delete(keys[0]) == 1
    assert rc.exists(keys[0]) == 0


def test_redis_py_hash_tags_keep_multi_key_commands_on_one_slot(rc, ns):
    tag = f"{{{ns}user}}"
    rc.set(tag + ".name", "ada")
    rc.set(tag + ".mail", "ada@example.org")
    assert rc.mget(tag + ".name", tag + ".mail") == ["ada", "ada@example.org"]
    assert rc.exists(tag + ".name", tag + ".mail") == 2
    # A transaction on one key of the slot runs as one register command.
    tx = rc.pipeline(transaction=True)
    tx.incr(tag + ".visits")
    tx.expire(tag + ".visits", 100)
    assert tx.execute() == [1, True]
    # Keys of several slots: the client refuses before sending, and the node if sent raw.
    with pytest.raises(RedisClusterException, match="same key slot"):
        rc.mget(ns + "a", ns + "b")
    node = rc.get_node_from_key(ns + "a")
    with pytest.raises(ResponseError, match="don't hash to the same slot"):
        rc.execute_command("MGET", ns + "a", ns + "b", target_nodes=node)


def test_redis_py_reads_from_replicas(clustered, ns):
    host, port = clustered.addresses[0]
    writer = RedisCluster(host=host, port=port, decode_responses=True)
    # Reads go round the slot's replicas, each sent READONLY first.
    reader = RedisCluster(host=host, port=port, decode_responses=True,
                          load_balancing_strategy=LoadBalancingStrategy.ROUND_ROBIN)
    try:
        for i in range(20):
            writer.set(f"{ns}r{i}", i)
        # Every replica serves the reads of every write acknowledged.
        assert [reader.get(f"{ns}r{i}") for i in range(20)] == [str(i) for i in range(20)]
    finally:
        writer.close()
        reader.close()


def test_a_plain_client_sees_cluster_mode(clustered):
    host, port = clustered.addresses[2]
    plain = redis.Redis(host=host, port=port, decode_responses=True)
    try:
        assert plain.info("server")["redis_mode"] == "cluster"
        assert plain.info("cluster")["cluster_enabled"] == 1
        assert plain.config_get("cluster-enabled") == {"cluster-enabled": "yes"}
        # redis-py shows the OK of these three as True.
        assert plain.execute_command("READONLY") is True
        assert plain.execute_command("READWRITE") is True
        assert plain.execute_command("ASKING") is True
    finally:
        plain.close()


def test_redis_cli_follows_the_cluster(clustered, ns):
    ports = clustered.ports
    for i, port in enumerate(ports):
        assert cli(port, "set", f"{ns}c{i}", i) == "OK\n"
    for port in ports:
        assert [cli(port, "get", f"{ns}c{i}") for i in range(3)] == ["0\n", "1\n", "2\n"]
    tag = f"{{{ns}t}}"
    cli(ports[0], "set", tag + "a", "x")
    cli(ports[0], "set", tag + "b", "y")
    assert cli(ports[1], "mget", tag + "a", tag + "b") == "x\ny\n"
    assert cli(ports[1], "mget", ns + "c0", ns + "c1").startswith("CROSSSLOT")
    assert cli(ports[2], "cluster", "info").startswith("cluster_state:ok")
    assert cli(ports[2], "cluster", "keyslot", "somekey") == "11058\n"
    # redis-cli's own check of a cluster: every node agrees and every slot is covered.
    check = subprocess.run([CLI, "--cluster", "check", f"127.0.0.1:{ports[0]}"],
                           capture_output=True, timeout=TIMEOUT_S)
    text = check.stdout.decode()
    assert check.returncode == 0, text
    assert "[OK] All nodes agree about slots configuration." in text
    assert "[OK] All 16384 slots covered." in text


def test_without_cluster_mode_cluster_commands_are_refused_as_redis_does(cluster):
    host, port = cluster.addresses[0]
    plain = redis.Redis(host=host, port=port)
    try:
        with pytest.raises(ResponseError, match="cluster support disabled"):
            plain.execute_command("CLUSTER", "SLOTS")
        with pytest.raises(ResponseError, match="cluster support disabled"):
            plain.execute_command("READONLY")
    finally:
        plain.close()
