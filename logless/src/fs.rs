//! `logless fs mount DIR`: NetFS (issue 26's file system) mounted through FUSE. With
//! `--connect HOST:PORT` the NetFS is the one a cluster of the psmr engine replicates
//! (`--service netfs`), reached through one Redis connection (`LOGLESS.FS`); without it the
//! NetFS is in this process and not replicated, and what is written there lives until the
//! unmount. The front end reaches either through NetFS's direct-client transport.
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

use logless_netfs::remote::RedisTransport;
use logless_netfs::{NetFs, Transport};
use logless_netfs_fuse::{NetFsFuse, Owner, Unmounted};
use tokio::signal::unix::{signal, SignalKind};

/// How often the foreground mount checks that nothing unmounted it from outside.
const UNMOUNT_POLL: Duration = Duration::from_millis(200);

/// The line the foreground mount prints once it serves; the background start waits for it.
const MOUNTED: &str = "mounted";

/// How long a call to a replicated NetFS waits for its connection and its reply before it
/// fails with `EIO`.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(clap::Args, Debug)]
pub struct FsArgs {
    #[command(subcommand)]
    command: FsCommand,
}

#[derive(clap::Subcommand, Debug)]
enum FsCommand {
    /// Mount NetFS on DIR through FUSE: with --connect, the NetFS a psmr cluster replicates
    /// (`logless up --engine psmr --service netfs`); without it, one that lives in this
    /// process, in memory and not replicated, whose files are gone after the unmount. Needs
    /// /dev/fuse, and root or the fusermount3 helper. Unmount with Ctrl-C or SIGTERM
    /// (`kill PID`), or `umount DIR`.
    Mount(MountArgs),
}

#[derive(clap::Args, Debug)]
struct MountArgs {
    /// An existing directory to mount on.
    dir: PathBuf,
    /// Stay in the foreground until Ctrl-C or SIGTERM. Without it the mount is served by a
    /// background process, whose id is printed.
    #[arg(long)]
    foreground: bool,
    /// Serve as the background process of a mount without --foreground: no log, and a
    /// failure to mount reported on stdout, which is all that the starting process reads
    /// (writing to a closed stderr would fail once it is gone).
    #[arg(long, hide = true, conflicts_with = "foreground")]
    background_process: bool,
    /// A replica of a psmr cluster serving NetFS (`--service netfs`), HOST:PORT of its Redis
    /// port. A call that cannot reach it, or gets no reply within 10 s, fails with EIO (and a
    /// line in the log); the next call connects again.
    #[arg(long, value_name = "HOST:PORT")]
    connect: Option<String>,
    /// The password of the cluster's clients (AUTH), with --connect.
    #[arg(
        long,
        env = "LOGLESS_PASSWORD",
        requires = "connect",
        hide_env_values = true
    )]
    password: Option<String>,
}

pub fn fs(args: &FsArgs) -> ExitCode {
    match &args.command {
        FsCommand::Mount(mount) if mount.foreground => serve_mount(mount, Report::Terminal),
        FsCommand::Mount(mount) if mount.background_process => serve_mount(mount, Report::Starter),
        FsCommand::Mount(mount) => start_in_background(mount),
    }
}

/// Serves `mount` on the NetFS it names.
fn serve_mount(mount: &MountArgs, report: Report) -> ExitCode {
    match &mount.connect {
        Some(addr) => {
            let transport = RedisTransport::new(addr, mount.password.clone(), CALL_TIMEOUT);
            let what = format!("NetFS (replicated, through {addr})");
            serve(&mount.dir, transport, &what, report)
        }
        None => serve(
            &mount.dir,
            NetFs::new(),
            "NetFS (in-process, not replicated)",
            report,
        ),
    }
}

/// Where the serving process reports.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Report {
    /// Logs and errors on stderr.
    Terminal,
    /// No log; a failure to mount on stdout, for the process that started this one.
    Starter,
}

/// Mounts `what`, reached through `transport`, on `dir` and serves until a signal, or until
/// something else unmounts it.
fn serve<T: Transport + Send + 'static>(
    dir: &Path,
    transport: T,
    what: &str,
    report: Report,
) -> ExitCode {
    if report == Report::Terminal {
        crate::server::init_logging(Some("warn"), false);
    }
    let fail = |message: String| {
        match report {
            Report::Terminal => eprintln!("error: {message}"),
            Report::Starter => {
                let _ = writeln!(std::io::stdout(), "error: {message}");
            }
        }
        ExitCode::FAILURE
    };
    let owner = match std::fs::metadata(dir) {
        Ok(metadata) => Owner {
            uid: metadata.uid(),
            gid: metadata.gid(),
        },
        Err(error) => return fail(format!("mount point {}: {error}", dir.display())),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => return fail(format!("cannot start the runtime: {error}")),
    };
    // The handlers go in before the mount: a signal sent once the mount serves must unmount it,
    // not end the process with the mount left behind.
    let (mut terminate, mut interrupt) = {
        let _entered = runtime.enter();
        match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(terminate), Ok(interrupt)) => (terminate, interrupt),
            (Err(error), _) | (_, Err(error)) => {
                return fail(format!("cannot handle signals: {error}"))
            }
        }
    };
    let mounted = match logless_netfs_fuse::mount(NetFsFuse::new(transport, owner), dir) {
        Ok(mounted) => mounted,
        Err(error) => return fail(error.to_string()),
    };
    // The background start reads this line; it may be gone by the time the mount ends, so a
    // failed write is no error.
    let _ = writeln!(
        std::io::stdout(),
        "{MOUNTED} {what} on {}",
        mounted.dir().display()
    );
    let _ = std::io::stdout().flush();
    runtime.block_on(async {
        let unmounted_outside = async {
            while mounted.is_serving() {
                tokio::time::sleep(UNMOUNT_POLL).await;
            }
        };
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
            () = unmounted_outside => {}
        }
    });
    match mounted.unmount() {
        Ok(Unmounted::Clean) => ExitCode::SUCCESS,
        Ok(Unmounted::Detached) => {
            if report == Report::Terminal {
                eprintln!(
                    "{} was busy: detached; what still used it fails from now on",
                    dir.display()
                );
            }
            ExitCode::SUCCESS
        }
        Err(error) => fail(error.to_string()),
    }
}

/// Starts this program as the mount's background process, in a process group of its own (so
/// the terminal's Ctrl-C does not reach it), and waits until it serves or fails.
fn start_in_background(mount: &MountArgs) -> ExitCode {
    let dir = &mount.dir;
    let binary = match std::env::current_exe() {
        Ok(binary) => binary,
        Err(error) => {
            eprintln!("error: cannot find this program to start it in the background: {error}");
            return ExitCode::FAILURE;
        }
    };
    let mut command = Command::new(binary);
    command
        .args(["fs", "mount", "--background-process"])
        .arg(dir);
    if let Some(addr) = &mount.connect {
        command.args(["--connect", addr]);
    }
    if let Some(password) = &mount.password {
        // Through the environment, not the command line that `ps` shows.
        command.env("LOGLESS_PASSWORD", password);
    }
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(error) => {
            eprintln!("error: cannot start the mount process: {error}");
            return ExitCode::FAILURE;
        }
    };
    let mut line = String::new();
    let stdout = child.stdout.take().expect("piped");
    // The first line comes once the mount serves; end of file means the process failed.
    let _ = BufReader::new(stdout).read_line(&mut line);
    if line.starts_with(MOUNTED) {
        println!(
            "{} (process {}; `kill {}` or `umount {}` unmounts)",
            line.trim_end(),
            child.id(),
            child.id(),
            dir.display()
        );
        return ExitCode::SUCCESS;
    }
    let _ = child.wait();
    match line.strip_prefix("error: ") {
        Some(error) => eprint!("error: {error}"),
        None => eprintln!("error: the mount process ended without mounting"),
    }
    ExitCode::FAILURE
}
