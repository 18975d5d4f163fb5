//! The runner's worker processes: spawning `memtune worker`, sending it
//! jobs, and turning what it prints (and its death) into [`Event`]s on one
//! channel, so the runner's loop is a single thread reacting to events.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};

use super::protocol::{Job, RunnerMsg, WorkerMsg, encode};

/// Lines of a worker's stderr kept for the record of a trial it died in.
const STDERR_TAIL: usize = 20;

#[derive(Debug)]
pub enum Event {
    Msg {
        worker: usize,
        msg: WorkerMsg,
    },
    /// A stdout line that is not a protocol message.
    Garbage {
        worker: usize,
        line: String,
    },
    /// The worker's stdout closed: it exited or is exiting.
    Closed {
        worker: usize,
    },
}

pub struct WorkerProc {
    pub id: usize,
    pub pid: u32,
    /// Trials handed to this process so far.
    pub served: usize,
    child: Child,
    stdin: Option<ChildStdin>,
    stderr_tail: Arc<Mutex<VecDeque<String>>>,
}

impl WorkerProc {
    /// Starts `exe worker` with `threads` compute threads.
    pub fn spawn(
        id: usize,
        exe: &Path,
        threads: usize,
        events: Sender<Event>,
    ) -> std::io::Result<Self> {
        let mut cmd = Command::new(exe);
        cmd.arg("worker")
            .env("RAYON_NUM_THREADS", threads.to_string())
            .env("MEMTUNE_RUNNER_PID", std::process::id().to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        outlive_stop_signals_from_exec(&mut cmd);
        let mut child = cmd.spawn()?;
        let pid = child.id();
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("stdout is piped");
        let stderr = child.stderr.take().expect("stderr is piped");
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let event = match serde_json::from_str::<WorkerMsg>(&line) {
                    Ok(msg) => Event::Msg { worker: id, msg },
                    Err(_) => Event::Garbage { worker: id, line },
                };
                if events.send(event).is_err() {
                    return;
                }
            }
            let _ = events.send(Event::Closed { worker: id });
        });
        let stderr_tail = Arc::new(Mutex::new(VecDeque::new()));
        let tail = Arc::clone(&stderr_tail);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                tracing::warn!(worker = id, pid, "stderr: {line}");
                let mut tail = tail.lock().unwrap_or_else(|e| e.into_inner());
                if tail.len() == STDERR_TAIL {
                    tail.pop_front();
                }
                tail.push_back(line);
            }
        });
        Ok(Self {
            id,
            pid,
            served: 0,
            child,
            stdin,
            stderr_tail,
        })
    }

    pub fn send_job(&mut self, job: &Job) -> std::io::Result<()> {
        self.served += 1;
        self.write_line(&encode(job))
    }

    pub fn answer(&mut self, msg: RunnerMsg) -> std::io::Result<()> {
        self.write_line(&encode(&msg))
    }

    fn write_line(&mut self, line: &str) -> std::io::Result<()> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| std::io::Error::other("worker input already closed"))?;
        writeln!(stdin, "{line}")?;
        stdin.flush()
    }

    /// Closes the worker's input: it exits once idle, and its output's
    /// [`Event::Closed`] follows.
    pub fn close_input(&mut self) {
        self.stdin = None;
    }

    /// Closes the worker's input (it exits when idle) and waits for it.
    pub fn retire(mut self) -> std::io::Result<ExitStatus> {
        self.stdin = None;
        self.child.wait()
    }

    /// [`Self::retire`] until `deadline`, then [`Self::kill`]: a worker
    /// stuck in a driver's teardown must not keep its runner from exiting.
    pub fn retire_by(mut self, deadline: std::time::Instant) {
        self.stdin = None;
        while std::time::Instant::now() < deadline {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        tracing::warn!(
            worker = self.id,
            pid = self.pid,
            "the worker did not exit: killed"
        );
        self.kill();
    }

    /// Kills the worker (if still alive); a thread of its own reaps it. A
    /// worker in an uninterruptible call (a driver call on a GPU that
    /// stopped answering) dies only when the call returns, and waiting for
    /// it here would stop the runner and every other trial with it.
    pub fn kill(mut self) {
        self.stdin = None;
        let _ = self.child.kill();
        let mut child = self.child;
        std::thread::spawn(move || child.wait());
    }

    /// Waits for a worker whose output closed, and describes how it ended,
    /// with the last lines it wrote to stderr.
    pub fn reap(mut self) -> (ExitStatus, String) {
        self.stdin = None;
        let status = self
            .child
            .wait()
            .expect("waiting on a child we spawned cannot fail");
        // The stderr reader may still be draining; give it a moment.
        std::thread::sleep(std::time::Duration::from_millis(50));
        let tail = self
            .stderr_tail
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .cloned()
            .collect::<Vec<_>>()
            .join("\n");
        (status, tail)
    }
}

/// The worker ignores the signals the runner takes as "stop" (Ctrl-C and a
/// closed terminal's SIGHUP reach the whole process group) from its first
/// instruction: a job is sent before the new process could install its own
/// handlers ([`super::worker::die_with_parent`]), and one of these signals
/// in between killed it with its trial.
fn outlive_stop_signals_from_exec(cmd: &mut Command) {
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: `signal` is async-signal-safe, as `pre_exec` requires; an
        // ignored disposition survives `execve`.
        unsafe {
            cmd.pre_exec(|| {
                for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                    libc::signal(signal, libc::SIG_IGN);
                }
                Ok(())
            });
        }
    }
}

/// "exit code 3" / "killed by signal 6 (SIGABRT)".
pub fn describe_exit(status: &ExitStatus) -> String {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = status.signal() {
            let name = match sig {
                libc::SIGABRT => " (SIGABRT)",
                libc::SIGKILL => " (SIGKILL)",
                libc::SIGSEGV => " (SIGSEGV)",
                libc::SIGBUS => " (SIGBUS)",
                libc::SIGTERM => " (SIGTERM)",
                _ => "",
            };
            return format!("killed by signal {sig}{name}");
        }
    }
    match status.code() {
        Some(code) => format!("exit code {code}"),
        None => "unknown exit".into(),
    }
}
