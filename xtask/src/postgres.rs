//! PostgreSQL server binaries for the store's tests and bench on PostgreSQL.
//!
//! The tests start their own throwaway server (`store::pg_server`) and need
//! only `initdb`, `pg_ctl` and `pg_dump`. They are taken from
//! `$MEMTUNE_PG_BIN`, else from the newest `/usr/lib/postgresql/N/bin`
//! (Debian's layout), else from beside `initdb` on `PATH`; when none is
//! found, Debian's `postgresql` package is installed with apt-get (as root,
//! or through `sudo -n`). The directory is passed on as `MEMTUNE_PG_BIN`.

use crate::{Result, env};
use std::path::PathBuf;
use std::process::Command;

/// The directory holding `initdb`, installing PostgreSQL if needed.
pub fn bin_dir() -> Result<PathBuf> {
    if let Some(dir) = find() {
        return Ok(dir);
    }
    eprintln!("xtask: no PostgreSQL server binaries (initdb); installing Debian's postgresql");
    apt(&["update"])?;
    apt(&["install", "-y", "--no-install-recommends", "postgresql"])?;
    find().ok_or_else(|| "apt-get installed postgresql, but no initdb was found".into())
}

fn find() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("MEMTUNE_PG_BIN") {
        return Some(PathBuf::from(dir));
    }
    let mut debian: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .collect();
    debian.sort();
    if let Some((_, bin)) = debian.pop() {
        return Some(bin);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|p| p.join("initdb"))
        .find(|p| p.is_file())
        .and_then(|p| std::fs::canonicalize(p).ok()?.parent().map(PathBuf::from))
}

/// `apt-get ARGS`, non-interactive, as root or through `sudo -n`.
fn apt(args: &[&str]) -> Result<()> {
    // SAFETY: geteuid has no preconditions; declared here to avoid a libc
    // dependency for one call.
    unsafe extern "C" {
        fn geteuid() -> u32;
    }
    let root = unsafe { geteuid() } == 0;
    let mut cmd = if root {
        Command::new("apt-get")
    } else {
        let mut c = Command::new("sudo");
        c.args(["-n", "apt-get"]);
        c
    };
    cmd.args(args).env("DEBIAN_FRONTEND", "noninteractive");
    env::run(&mut cmd)
}
