//! optuna-dashboard, as its users start it (the `optuna-dashboard` command
//! of the reference venv), served on 127.0.0.1 for the length of a test,
//! and plain HTTP GETs of its JSON API.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value as Json;

/// How long the dashboard may take to answer after its start: it imports
/// Optuna, SQLAlchemy and scikit-learn on a busy 2-core machine.
const READY_WITHIN: Duration = Duration::from_secs(120);

/// A running optuna-dashboard; dropping it kills the server, so a failed
/// assertion leaves no process behind.
pub struct Dashboard {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Dashboard {
    /// The `optuna-dashboard` command installed beside `python` (the venv's
    /// `bin/`), if there is one.
    pub fn command_beside(python: &Path) -> Option<PathBuf> {
        let cmd = python.with_file_name("optuna-dashboard");
        cmd.is_file().then_some(cmd)
    }

    /// Starts `optuna-dashboard STORAGE_URL --host 127.0.0.1 --port P` on a
    /// free port, with its output in `log_dir`, and waits until its API
    /// answers; a panic with the server's output if it never does.
    pub fn start(python: &Path, command: &Path, storage_url: &str, log_dir: &Path) -> Dashboard {
        // Another process can take the probed port before the server binds
        // it: then try another.
        let mut last = String::new();
        for attempt in 0..3 {
            let port = free_port();
            let log = log_dir.join(format!("dashboard-{attempt}.log"));
            let out = std::fs::File::create(&log).unwrap();
            let child = Command::new(python)
                .arg(command)
                .arg(storage_url)
                .args(["--host", "127.0.0.1", "--port", &port.to_string()])
                .args(["--server", "wsgiref"])
                .stdin(Stdio::null())
                .stdout(out.try_clone().unwrap())
                .stderr(out)
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start {}: {e}", command.display()));
            let mut dashboard = Dashboard { child, port, log };
            match dashboard.wait_ready() {
                Ok(()) => return dashboard,
                Err(why) => last = format!("{why}\n{}", dashboard.output()),
            }
            if !last.contains("Address already in use") {
                break;
            }
        }
        panic!("optuna-dashboard did not start: {last}");
    }

    /// Polls `/api/meta` until it answers 200, the server exits, or
    /// [`READY_WITHIN`] passes.
    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Err(format!("optuna-dashboard exited with {status}"));
            }
            if let Ok((200, _)) = http_get(self.port, "/api/meta") {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("no answer within {READY_WITHIN:?}"));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// What the server printed so far.
    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `GET PATH` as JSON; a panic with the server's output unless it is a
    /// 200 with a JSON body.
    pub fn get(&self, path: &str) -> Json {
        let (status, body) = http_get(self.port, path)
            .unwrap_or_else(|e| panic!("GET {path}: {e}\n{}", self.output()));
        let body = String::from_utf8_lossy(&body);
        assert_eq!(status, 200, "GET {path}: {body}\n{}", self.output());
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: not JSON ({e}): {body}"))
    }
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("no free port on 127.0.0.1: {e}"))
}

/// A minimal HTTP/1.0 GET on 127.0.0.1 (the server closes the connection
/// after the body, so no chunking or keep-alive): the status and the body.
fn http_get(port: u16, path: &str) -> std::io::Result<(u16, Vec<u8>)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nAccept: application/json\r\n\r\n"
    )?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response)?;
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
    let split = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| bad("no end of headers"))?;
    let head = String::from_utf8_lossy(&response[..split]);
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad(&format!("no status in {head:?}")))?;
    Ok((status, response[split + 4..].to_vec()))
}
