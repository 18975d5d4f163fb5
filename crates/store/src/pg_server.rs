//! A throwaway PostgreSQL server on 127.0.0.1, for tests and benchmarks that
//! need a real one: `initdb` into a fresh temporary directory, `pg_ctl
//! start` on a free port with trust authentication, and stop-and-delete when
//! dropped or when the process that started it exits (a watchdog process
//! does it even after `kill -9`).
//!
//! The binaries are looked up in `$MEMTUNE_PG_BIN`, then beside `initdb` on
//! `PATH`, then in the newest `/usr/lib/postgresql/N/bin` (Debian's layout).
//! `initdb` refuses to run as root, so as root the server runs as the
//! `postgres` user (made by Debian's package), through `runuser`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A running server; stopped and deleted on drop.
#[derive(Debug)]
pub struct PgServer {
    dir: PathBuf,
    bin: PathBuf,
    port: u16,
    run_as: Option<String>,
    /// The server's options (`pg_ctl -o`), kept for restarts.
    options: String,
}

/// A certificate and its private key, PEM files.
#[derive(Clone, Debug)]
pub struct CertPair {
    /// The certificate, `NAME.crt`.
    pub cert: PathBuf,
    /// Its private key, unencrypted, `NAME.key`.
    pub key: PathBuf,
}

/// A self-signed certificate for `names` (DNS names or IP addresses) made
/// with the `openssl` command in `dir`, as `NAME.crt` and `NAME.key`: a
/// server's certificate that is its own certificate authority.
pub fn self_signed_cert(dir: &Path, name: &str, names: &[&str]) -> Result<CertPair, String> {
    let pair = CertPair {
        cert: dir.join(format!("{name}.crt")),
        key: dir.join(format!("{name}.key")),
    };
    let san = names
        .iter()
        .map(|n| {
            if n.parse::<std::net::IpAddr>().is_ok() {
                format!("IP:{n}")
            } else {
                format!("DNS:{n}")
            }
        })
        .collect::<Vec<_>>()
        .join(",");
    let out = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        ])
        .arg("-keyout")
        .arg(&pair.key)
        .arg("-out")
        .arg(&pair.cert)
        .args(["-subj", &format!("/CN={}", names.first().unwrap_or(&name))])
        .args(["-addext", &format!("subjectAltName={san}")])
        .stdin(Stdio::null())
        .output();
    openssl_done(out)?;
    Ok(pair)
}

/// A certificate for `names` signed by the certificate authority `ca`, as
/// `NAME.crt` and `NAME.key` in `dir`.
pub fn ca_signed_cert(
    dir: &Path,
    ca: &CertPair,
    name: &str,
    names: &[&str],
) -> Result<CertPair, String> {
    let pair = CertPair {
        cert: dir.join(format!("{name}.crt")),
        key: dir.join(format!("{name}.key")),
    };
    let csr = dir.join(format!("{name}.csr"));
    let ext = dir.join(format!("{name}.ext"));
    let san = names
        .iter()
        .map(|n| match n.parse::<std::net::IpAddr>() {
            Ok(_) => format!("IP:{n}"),
            Err(_) => format!("DNS:{n}"),
        })
        .collect::<Vec<_>>()
        .join(",");
    std::fs::write(
        &ext,
        format!("basicConstraints=CA:FALSE\nsubjectAltName={san}\n"),
    )
    .map_err(|e| format!("{}: {e}", ext.display()))?;
    openssl_done(
        Command::new("openssl")
            .args(["req", "-new", "-newkey", "rsa:2048", "-nodes", "-subj"])
            .arg(format!("/CN={}", names.first().unwrap_or(&name)))
            .arg("-keyout")
            .arg(&pair.key)
            .arg("-out")
            .arg(&csr)
            .stdin(Stdio::null())
            .output(),
    )?;
    openssl_done(
        Command::new("openssl")
            .args(["x509", "-req", "-days", "2", "-CAcreateserial"])
            .arg("-in")
            .arg(&csr)
            .arg("-CA")
            .arg(&ca.cert)
            .arg("-CAkey")
            .arg(&ca.key)
            .arg("-extfile")
            .arg(&ext)
            .arg("-out")
            .arg(&pair.cert)
            .stdin(Stdio::null())
            .output(),
    )?;
    Ok(pair)
}

fn openssl_done(out: std::io::Result<std::process::Output>) -> Result<(), String> {
    let out = out.map_err(|e| format!("cannot run openssl: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "openssl failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Where the server binaries are, or why none were found.
pub fn find_bin_dir() -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os("MEMTUNE_PG_BIN") {
        let dir = PathBuf::from(dir);
        return if dir.join("initdb").is_file() {
            Ok(dir)
        } else {
            Err(format!(
                "MEMTUNE_PG_BIN={} has no initdb in it",
                dir.display()
            ))
        };
    }
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("initdb"))
            .find(|p| p.is_file())
    });
    if let Some(initdb) = on_path {
        // Debian links /usr/bin tools to a wrapper; follow links to the real dir.
        let real = std::fs::canonicalize(&initdb).unwrap_or(initdb);
        if let Some(dir) = real.parent()
            && dir.join("pg_ctl").is_file()
        {
            return Ok(dir.to_path_buf());
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").is_file().then_some((v, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin).ok_or_else(|| {
        "no PostgreSQL server binaries (initdb): install Debian's `postgresql` package \
         or set MEMTUNE_PG_BIN"
            .to_string()
    })
}

impl PgServer {
    /// Start a fresh server, or say why it cannot be started.
    pub fn start() -> Result<PgServer, String> {
        PgServer::start_with(None)
    }

    /// Start a fresh server that accepts only TLS connections, with
    /// `tls`'s certificate and key.
    pub fn start_tls(tls: &CertPair) -> Result<PgServer, String> {
        PgServer::start_with(Some(tls))
    }

    fn start_with(tls: Option<&CertPair>) -> Result<PgServer, String> {
        let bin = find_bin_dir()?;
        // SAFETY: geteuid has no preconditions.
        let run_as = (unsafe { libc::geteuid() } == 0).then(|| "postgres".to_string());
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "memtune-pg-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut server = PgServer {
            dir,
            bin,
            port: 0,
            run_as,
            options: String::new(),
        };
        if let Some(user) = &server.run_as {
            chown(&server.dir, user)?;
        }
        server.watch()?;
        server.run(
            "initdb",
            &[
                "-D",
                &server.data().display().to_string(),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ],
        )?;
        let mut tls_options = String::new();
        if let Some(tls) = tls {
            tls_options = server.install_tls(tls)?;
        }
        // A free port can be taken between our probe and the server's bind:
        // try a few.
        let mut last = String::new();
        for _ in 0..3 {
            server.port = free_port()?;
            server.options = format!(
                "-p {} -k {} -c listen_addresses=127.0.0.1 -c max_connections=200{tls_options}",
                server.port,
                server.dir.display()
            );
            match server.pg_ctl_start() {
                Ok(()) => return Ok(server),
                Err(e) => {
                    let tail =
                        std::fs::read_to_string(server.dir.join("server.log")).unwrap_or_default();
                    last = format!("{e}\n{tail}");
                }
            }
        }
        Err(last)
    }

    fn pg_ctl_start(&self) -> Result<(), String> {
        let log = self.dir.join("server.log").display().to_string();
        let data = self.data().display().to_string();
        self.run(
            "pg_ctl",
            &["-D", &data, "-o", &self.options, "-l", &log, "-w", "start"],
        )
    }

    /// The certificate and key copied into the data directory (owned by
    /// the server's user, the key private to it, as the server demands),
    /// `pg_hba.conf` refusing connections without TLS; the server options
    /// that turn TLS on.
    fn install_tls(&self, tls: &CertPair) -> Result<String, String> {
        let data = self.data();
        let (cert, key) = (data.join("server.crt"), data.join("server.key"));
        for (from, to) in [(&tls.cert, &cert), (&tls.key, &key)] {
            std::fs::copy(from, to).map_err(|e| format!("{}: {e}", from.display()))?;
        }
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| format!("{}: {e}", key.display()))?;
        if let Some(user) = &self.run_as {
            chown(&cert, user)?;
            chown(&key, user)?;
        }
        let hba = "local all all trust\n\
                   hostssl all all 127.0.0.1/32 trust\n\
                   hostnossl all all 127.0.0.1/32 reject\n";
        std::fs::write(data.join("pg_hba.conf"), hba).map_err(|e| format!("pg_hba.conf: {e}"))?;
        Ok(format!(
            " -c ssl=on -c ssl_cert_file={} -c ssl_key_file={}",
            cert.display(),
            key.display()
        ))
    }

    /// Stop the server (`pg_ctl stop -m fast`: every connection is cut)
    /// and, after `down`, start it again on the same port; clients must
    /// connect again.
    pub fn restart(&self, down: std::time::Duration) -> Result<(), String> {
        self.stop()?;
        std::thread::sleep(down);
        self.start_again()
    }

    /// Stop the server (`pg_ctl stop -m fast -w`): when this returns,
    /// every connection is cut and nothing listens on the port.
    pub fn stop(&self) -> Result<(), String> {
        let data = self.data().display().to_string();
        self.run("pg_ctl", &["-D", &data, "-m", "fast", "-w", "stop"])
    }

    /// Start a stopped server again on its port, with its options.
    pub fn start_again(&self) -> Result<(), String> {
        self.pg_ctl_start()
    }

    /// End every other connection to database `db`, as an administrator's
    /// `pg_terminate_backend` does; how many were ended.
    pub fn terminate_connections(&self, db: &str) -> Result<u64, String> {
        let mut client = self.admin()?;
        let rows = client
            .query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE datname = $1 AND pid <> pg_backend_pid()",
                &[&db],
            )
            .map_err(|e| format!("pg_terminate_backend: {e}"))?;
        Ok(rows.len() as u64)
    }

    /// The port the server listens on (127.0.0.1 only).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of database `db` as user `postgres` (no password: trust).
    pub fn url(&self, db: &str) -> String {
        format!("postgresql://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// The directory with the server's binaries (`pg_dump`, `psql`, ...).
    pub fn bin_dir(&self) -> &Path {
        &self.bin
    }

    /// A connection to the `postgres` database through the server's Unix
    /// socket (which needs no TLS, whatever the server demands on TCP).
    fn admin(&self) -> Result<postgres::Client, String> {
        let conninfo = format!(
            "host={} port={} user=postgres dbname=postgres",
            self.dir.display(),
            self.port
        );
        postgres::Client::connect(&conninfo, postgres::NoTls)
            .map_err(|e| format!("{}: {e}", self.url("postgres")))
    }

    /// Create an empty database and return its URL.
    pub fn create_database(&self, db: &str) -> Result<String, String> {
        let mut client = self.admin()?;
        client
            .batch_execute(&format!("CREATE DATABASE \"{db}\""))
            .map_err(|e| format!("CREATE DATABASE {db}: {e}"))?;
        Ok(self.url(db))
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// Run one of the server's programs, as the server's user.
    fn run(&self, program: &str, args: &[&str]) -> Result<(), String> {
        let exe = self.bin.join(program);
        let mut cmd = match &self.run_as {
            Some(user) => {
                let mut c = Command::new("runuser");
                c.args(["-u", user, "--"]).arg(&exe);
                c
            }
            None => Command::new(&exe),
        };
        // The server's user may not be allowed into our working directory.
        let out = cmd
            .args(args)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{program} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }

    /// A shell that waits for this process to end, then stops the server
    /// and deletes its directory: cleanup even when we are killed.
    fn watch(&self) -> Result<(), String> {
        let pg_ctl = self.bin.join("pg_ctl");
        let stop = match &self.run_as {
            Some(user) => format!("runuser -u {user} -- '{}'", pg_ctl.display()),
            None => format!("'{}'", pg_ctl.display()),
        };
        let script = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 1; done; \
             {stop} -D '{data}' -m immediate stop >/dev/null 2>&1; rm -rf '{dir}'",
            pid = std::process::id(),
            data = self.data().display(),
            dir = self.dir.display(),
        );
        Command::new("sh")
            .args(["-c", &script])
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map(drop)
            .map_err(|e| format!("cannot start the server's watchdog: {e}"))
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let data = self.data().display().to_string();
        let _ = self.run("pg_ctl", &["-D", &data, "-m", "immediate", "stop"]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The server of this process, started on first use (the watchdog stops it
/// when the process exits), or why none could be started.
pub fn shared() -> Result<&'static PgServer, &'static str> {
    static SERVER: OnceLock<Result<PgServer, String>> = OnceLock::new();
    SERVER
        .get_or_init(PgServer::start)
        .as_ref()
        .map_err(String::as_str)
}

/// For tests: the URL of a new empty database on the [`shared`] server,
/// named after `name`. Without a server: `None` after saying why on
/// stderr (the test then skips), or a panic under `CI=true`, where every
/// test must run.
pub fn test_database(name: &str) -> Option<String> {
    let server = match shared() {
        Ok(s) => s,
        Err(e) if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") => {
            panic!("CI must run the PostgreSQL tests, but no server could be started: {e}")
        }
        Err(e) => {
            eprintln!("skipping: no PostgreSQL server could be started: {e}");
            return None;
        }
    };
    static SEQ: AtomicUsize = AtomicUsize::new(0);
    let db = format!(
        "{}_{}",
        name.to_lowercase(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    );
    Some(
        server
            .create_database(&db)
            .unwrap_or_else(|e| panic!("{e}")),
    )
}

/// A port free now, below Linux's range of ports it hands out on its own
/// (`ip_local_port_range`, from 32768): a server restarted in a test must
/// find its port free again, and an outgoing connection's or another
/// test's `bind(0)` would take one from that range.
fn free_port() -> Result<u16, String> {
    use std::sync::atomic::{AtomicU32, Ordering};
    const FIRST: u32 = 20_000;
    const COUNT: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let start = std::process::id().wrapping_mul(7_919);
    for _ in 0..COUNT {
        let port = FIRST + start.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed)) % COUNT;
        if std::net::TcpListener::bind(("127.0.0.1", port as u16)).is_ok() {
            return Ok(port as u16);
        }
    }
    Err(format!(
        "no free port on 127.0.0.1 in {FIRST}..{}",
        FIRST + COUNT
    ))
}

fn chown(path: &Path, user: &str) -> Result<(), String> {
    let status = Command::new("chown")
        .arg(user)
        .arg(path)
        .status()
        .map_err(|e| format!("cannot run chown: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "chown {user} {} failed: as root the server runs as user `{user}`, \
             which Debian's postgresql package creates",
            path.display()
        ))
    }
}
