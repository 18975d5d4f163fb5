//! Headless Chromium for the report's browser tests
//! (`crates/cli/tests/report_browser.rs`): Debian's `chromium` package,
//! installed with apt-get when it is missing and `CI=true` (CI runs as
//! root on Debian). Elsewhere a missing browser is left to the tests,
//! which then skip with a message.

use crate::{Result, env};
use std::path::{Path, PathBuf};
use std::process::Command;

const BROWSER: &str = "/usr/bin/chromium";

/// The browser's path, installing it first on CI; `None` where it is
/// missing and this is not CI.
pub fn ensure() -> Result<Option<PathBuf>> {
    if let Some(p) = std::env::var_os("MEMTUNE_CHROMIUM") {
        return Ok(Some(PathBuf::from(p)));
    }
    if Path::new(BROWSER).exists() {
        return Ok(Some(BROWSER.into()));
    }
    if std::env::var("CI").as_deref() != Ok("true") {
        eprintln!(
            "xtask: {BROWSER} is missing: the report's browser tests will skip (apt-get install chromium)"
        );
        return Ok(None);
    }
    eprintln!("xtask: installing chromium for the report's browser tests");
    env::run(Command::new("apt-get").arg("update").arg("-q"))?;
    env::run(
        Command::new("apt-get")
            .args(["install", "-y", "-q", "--no-install-recommends", "chromium"])
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )?;
    Ok(Some(BROWSER.into()))
}
