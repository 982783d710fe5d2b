//! NetFS against the machine's own file system: the workload of [`logless_netfs::workload`]
//! runs through the direct client on a [`NetFs`] and through `std::fs` on a temporary
//! directory, and every step must give the same result there and here, errors by their errno.
use logless_netfs::workload::Comparison;
use logless_netfs::{Client, NetFs};

#[test]
fn a_small_workload_matches_a_local_directory() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let comparison = Comparison::new(Client::new(NetFs::new()), dir.path());
    let (client, errors) = comparison.finish();
    assert!(
        errors >= 10,
        "the workload checks the errors too ({errors})"
    );
    // The directory handle of step `Open("/d/c")` failed on both sides (EISDIR); what is left
    // open is nothing, and only the root is left.
    let fs = client.transport();
    assert_eq!(fs.handle_count(), 0);
    assert_eq!(fs.inode_count(), 1);
}

#[test]
fn errno_numbers_are_the_platform_s() {
    use logless_netfs::Errno;
    let pairs = [
        (Errno::Enoent, libc::ENOENT),
        (Errno::Ebadf, libc::EBADF),
        (Errno::Eacces, libc::EACCES),
        (Errno::Ebusy, libc::EBUSY),
        (Errno::Eexist, libc::EEXIST),
        (Errno::Exdev, libc::EXDEV),
        (Errno::Enotdir, libc::ENOTDIR),
        (Errno::Eisdir, libc::EISDIR),
        (Errno::Einval, libc::EINVAL),
        (Errno::Emfile, libc::EMFILE),
        (Errno::Efbig, libc::EFBIG),
        (Errno::Enospc, libc::ENOSPC),
        (Errno::Enotempty, libc::ENOTEMPTY),
    ];
    for (errno, code) in pairs {
        assert_eq!(errno.code(), code, "{errno:?}");
    }
}
