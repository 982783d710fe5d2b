//! NetFS replicated by the psmr engine (`--service netfs`), served by real `logless` processes:
//! the workload of [`logless_netfs::workload`] (create, write, read back, rename within a
//! directory, unlink, mkdir, readdir, and the errors of misuse) runs through the direct client
//! over Redis (`LOGLESS.FS`) in every mode, each step compared with a local directory, moving
//! from replica to replica on the way; the replicas' digests are equal at the end. Under
//! P-SMR a replica is killed with SIGKILL in the middle and restarted, and catches up.
mod common;

use std::time::Duration;

use common::Cluster;
use logless_netfs::remote::RedisTransport;
use logless_netfs::workload::{Comparison, WORKLOAD};
use logless_netfs::Client;

fn netfs_cluster(replicas: usize, mode: &str) -> Cluster {
    let args = [
        "--engine",
        "psmr",
        "--threads",
        "2",
        "--psmr-mode",
        mode,
        "--service",
        "netfs",
    ];
    Cluster::start_with(replicas, "mmap", &args)
}

fn transport(cluster: &Cluster, i: usize) -> RedisTransport {
    let addr = cluster.replicas[i].spec.client.to_string();
    RedisTransport::new(&addr, None, Duration::from_secs(10))
}

/// The key-value commands are refused with the reason, and INFO names the service.
fn check_refusals_and_info(con: &mut redis::Connection) {
    for args in [
        &["GET", "k"][..],
        &["SET", "k", "v", "NX"],
        &["LOGLESS.RANGE", "a"],
    ] {
        let mut command = redis::cmd(args[0]);
        args[1..].iter().for_each(|a| {
            command.arg(*a);
        });
        let error = command.query::<String>(con).unwrap_err().to_string();
        assert!(error.contains("serves NetFS (--service netfs)"), "{error}");
    }
    let info: String = redis::cmd("INFO").query(con).unwrap();
    assert!(info.contains("psmr_service:netfs"), "{info}");
}

/// The workload through replica after replica (a third of it each), then equal digests.
fn every_mode_case(mode: &str, replicas: usize) {
    let cluster = netfs_cluster(replicas, mode);
    check_refusals_and_info(&mut cluster.connect(0));
    let root = tempfile::tempdir().unwrap();
    let mut comparison = Comparison::new(Client::new(transport(&cluster, 0)), root.path());
    let third = WORKLOAD.len().div_ceil(3);
    for i in 0..3 {
        comparison.set_transport(transport(&cluster, i % replicas));
        comparison.run(third);
    }
    let (_, errors) = comparison.finish();
    assert!(
        errors >= 10,
        "the workload checks the errors too ({errors})"
    );
    cluster.digests_agree(Duration::from_secs(10));
}

#[test]
fn psmr_serves_netfs_like_a_local_directory() {
    every_mode_case("psmr", 3);
}

#[test]
fn sp_smr_serves_netfs_like_a_local_directory() {
    every_mode_case("sp-smr", 3);
}

#[test]
fn smr_serves_netfs_like_a_local_directory() {
    every_mode_case("smr", 3);
}

#[test]
fn no_rep_serves_netfs_like_a_local_directory() {
    every_mode_case("no-rep", 1);
}

#[test]
fn a_killed_replica_catches_up_on_netfs() {
    let mut cluster = netfs_cluster(3, "psmr");
    let root = tempfile::tempdir().unwrap();
    let mut comparison = Comparison::new(Client::new(transport(&cluster, 0)), root.path());
    let third = WORKLOAD.len().div_ceil(3);
    comparison.run(third);
    cluster.kill(2);
    // Served by the other two meanwhile.
    comparison.run(third);
    let during = cluster.digests_agree(Duration::from_secs(10));
    cluster.spawn(2);
    cluster.wait_serving(Duration::from_secs(30));
    assert_eq!(
        cluster.digests_agree(Duration::from_secs(20)),
        during,
        "the restarted replica caught up"
    );
    // The rest through the restarted replica.
    comparison.set_transport(transport(&cluster, 2));
    comparison.finish();
    cluster.digests_agree(Duration::from_secs(10));
}
