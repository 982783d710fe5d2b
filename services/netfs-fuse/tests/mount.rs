//! NetFS mounted through FUSE against the machine's own file system: one workload of real
//! system calls (create, write, read back, overwrite, rename within a directory, replace,
//! unlink, readdir, truncate, and misuse) runs in a temporary directory and in a NetFS mounted
//! on another, and every step must show the same there and here, errors by their errno.
//!
//! Skipped, with a message saying why, where FUSE cannot be used: no usable /dev/fuse, or a
//! mount the kernel does not permit (not root and no fusermount3, or a container without the
//! right to mount).
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use logless_netfs::NetFs;
use logless_netfs_fuse::{mount, MountError, Mounted, NetFsFuse, Owner, Unmounted};

/// The longest the workload may take on the mount before the test fails.
const WORKLOAD_TIMEOUT: Duration = Duration::from_secs(60);

/// What one step showed: its value, or its errno.
fn seen<T: std::fmt::Debug>(step: &str, outcome: io::Result<T>) -> String {
    match outcome {
        Ok(value) => format!("{step}: {value:?}"),
        Err(error) => format!("{step}: errno {:?}", error.raw_os_error()),
    }
}

fn read(path: &Path) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    File::open(path)?.read_to_end(&mut bytes)?;
    Ok(bytes)
}

fn names(dir: &Path) -> io::Result<Vec<String>> {
    let mut names = fs::read_dir(dir)?
        .map(|entry| {
            let entry = entry?;
            let kind = if entry.file_type()?.is_dir() { "/" } else { "" };
            Ok(format!("{}{kind}", entry.file_name().to_string_lossy()))
        })
        .collect::<io::Result<Vec<_>>>()?;
    names.sort();
    Ok(names)
}

fn stat(path: &Path) -> io::Result<(bool, u64)> {
    let metadata = fs::symlink_metadata(path)?;
    Ok((
        metadata.is_dir(),
        if metadata.is_dir() { 0 } else { metadata.len() },
    ))
}

/// The workload, run under `root`; the transcript of what every step showed.
fn workload(root: &Path) -> Vec<String> {
    let d = root.join("d");
    let (a, b, c) = (d.join("a"), d.join("b"), d.join("c"));
    let mut out = Vec::new();
    // Larger than the kernel's largest single FUSE write (128 KiB), so it takes several.
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    out.push(seen("mkdir d", fs::create_dir(&d)));
    out.push(seen("mkdir d again", fs::create_dir(&d)));
    out.push(seen("write a", fs::write(&a, b"hello world")));
    out.push(seen("read a", read(&a)));
    out.push(seen("create_new a", File::create_new(&a).map(|_| ())));
    let overwrite = (|| {
        let mut file = OpenOptions::new().write(true).open(&a)?;
        file.seek(SeekFrom::Start(6))?;
        file.write_all(b"THERE")?;
        file.seek(SeekFrom::Start(20))?;
        file.write_all(b"!")
    })();
    out.push(seen("overwrite a and write past its end", overwrite));
    out.push(seen("read a", read(&a)));
    out.push(seen("stat a", stat(&a)));
    out.push(seen("write big b", fs::write(&b, &big)));
    out.push(seen("read big b", read(&b).map(|bytes| bytes == big)));
    out.push(seen("stat b", stat(&b)));
    out.push(seen("readdir d", names(&d)));
    out.push(seen("rename a to c", fs::rename(&a, &c)));
    out.push(seen("read a", read(&a)));
    out.push(seen("read c", read(&c)));
    out.push(seen("rename c over b", fs::rename(&c, &b)));
    out.push(seen("read b", read(&b)));
    out.push(seen("readdir d", names(&d)));
    let truncate = (|| {
        let file = OpenOptions::new().write(true).open(&b)?;
        file.set_len(30)?;
        let grown = fs::metadata(&b)?.len();
        file.set_len(0)?;
        Ok((grown, fs::metadata(&b)?.len()))
    })();
    out.push(seen("grow b to 30, then truncate to 0", truncate));
    out.push(seen("write b with O_TRUNC", fs::write(&b, b"short")));
    out.push(seen("read b", read(&b)));
    out.push(seen("rmdir d (not empty)", fs::remove_dir(&d)));
    out.push(seen("unlink b", fs::remove_file(&b)));
    out.push(seen("unlink b again", fs::remove_file(&b)));
    out.push(seen("stat b", stat(&b)));
    out.push(seen("unlink d (a directory)", fs::remove_file(&d)));
    out.push(seen("readdir d", names(&d)));
    out.push(seen("readdir /", names(root)));
    out.push(seen("rmdir d", fs::remove_dir(&d)));
    out.push(seen("readdir /", names(root)));
    out
}

/// Why FUSE cannot be used here, if it cannot.
fn fuse_unusable() -> Option<String> {
    match OpenOptions::new().read(true).write(true).open("/dev/fuse") {
        Ok(_) => None,
        Err(error) => Some(format!("/dev/fuse is not usable: {error}")),
    }
}

fn owner_of(dir: &Path) -> Owner {
    use std::os::unix::fs::MetadataExt;
    let metadata = fs::metadata(dir).unwrap();
    Owner {
        uid: metadata.uid(),
        gid: metadata.gid(),
    }
}

#[test]
fn a_mounted_netfs_behaves_like_a_local_directory() {
    if let Some(why) = fuse_unusable() {
        println!("SKIPPED: NetFS FUSE mount test: {why}");
        return;
    }
    let local = tempfile::tempdir().unwrap();
    let mount_point = tempfile::tempdir().unwrap();
    let filesystem = NetFsFuse::new(NetFs::new(), owner_of(mount_point.path()));
    let mounted: Mounted = match mount(filesystem, mount_point.path()) {
        Ok(mounted) => mounted,
        Err(MountError::Mount { source, .. })
            if source.kind() == io::ErrorKind::PermissionDenied =>
        {
            println!("SKIPPED: NetFS FUSE mount test: mounting is not permitted here ({source})");
            return;
        }
        Err(error) => panic!("{error}"),
    };
    let expected = workload(local.path());

    let (sender, receiver) = mpsc::channel();
    let dir = mounted.dir().to_path_buf();
    std::thread::spawn(move || {
        let _ = sender.send(workload(&dir));
    });
    // `mounted` unmounts when dropped, also when this fails.
    let got = receiver
        .recv_timeout(WORKLOAD_TIMEOUT)
        .expect("the workload on the mount finishes in time");
    for (step, (want, have)) in expected.iter().zip(&got).enumerate() {
        assert_eq!(want, have, "step {step} differs");
    }
    assert_eq!(expected.len(), got.len());
    assert!(mounted.is_serving());
    assert_eq!(mounted.unmount().unwrap(), Unmounted::Clean);
    assert!(
        fs::read_dir(mount_point.path()).unwrap().next().is_none(),
        "the mount point is an empty directory again"
    );
}
