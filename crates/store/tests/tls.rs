//! TLS to PostgreSQL with libpq's `sslmode` and `sslrootcert`, against a
//! throwaway server that refuses unencrypted connections, with self-signed
//! certificates made by `openssl`.

use store::pg_server::{PgServer, ca_signed_cert, self_signed_cert};
use store::{OpenOptions, Storage, StoreError, StudyDirection};

struct Tls {
    _dir: tempfile::TempDir,
    _server: PgServer,
    /// `postgresql://postgres@127.0.0.1:PORT/tls`
    base: String,
    /// The server's certificate (its own CA), issued for `db.example` only.
    server_cert: std::path::PathBuf,
    /// Another CA's certificate.
    other_cert: std::path::PathBuf,
}

fn tls_server() -> Option<Tls> {
    let dir = tempfile::tempdir().unwrap();
    let started = self_signed_cert(dir.path(), "server", &["db.example"]).and_then(|pair| {
        let server = PgServer::start_tls(&pair)?;
        Ok((pair, server))
    });
    let (pair, server) = match started {
        Ok(s) => s,
        Err(e) if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") => {
            panic!("CI must run the TLS tests, but no server could be started: {e}")
        }
        Err(e) => {
            eprintln!("skipping: no TLS PostgreSQL server: {e}");
            return None;
        }
    };
    let other = self_signed_cert(dir.path(), "other", &["db.example"]).unwrap();
    let base = server.create_database("tls").unwrap();
    Some(Tls {
        _dir: dir,
        _server: server,
        base,
        server_cert: pair.cert,
        other_cert: other.cert,
    })
}

fn open(url: &str) -> store::Result<Storage> {
    Storage::open_url(url, &OpenOptions::default())
}

/// Whether the storage's own connection is encrypted.
fn encrypted(storage: &Storage) -> bool {
    let rows = storage
        .query_text("SELECT ssl::text FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .unwrap();
    rows[0][0].as_deref() == Some("true")
}

#[test]
fn every_sslmode_does_what_libpq_does() {
    let Some(tls) = tls_server() else {
        return;
    };
    let with = |query: &str| format!("{}?{query}", tls.base);
    let root = tls.server_cert.display().to_string();
    let other = tls.other_cert.display().to_string();

    // The server refuses unencrypted connections.
    let err = open(&with("sslmode=disable")).unwrap_err();
    assert!(matches!(err, StoreError::Postgres { .. }), "{err:?}");
    assert!(err.to_string().contains("no encryption"), "{err}");

    // Encrypted, the certificate not checked: the default (prefer) and require.
    for query in ["", "sslmode=prefer", "sslmode=require"] {
        let url = if query.is_empty() {
            tls.base.clone()
        } else {
            with(query)
        };
        let s = open(&url).unwrap_or_else(|e| panic!("{query}: {e}"));
        assert!(encrypted(&s), "{query}");
        let study = s
            .create_study(&format!("s{}", query.len()), &[StudyDirection::Minimize])
            .unwrap();
        s.create_trial(study.study_id).unwrap();
    }

    // verify-ca: signed by the given root, whatever the host name.
    let s = open(&with(&format!("sslmode=verify-ca&sslrootcert={root}"))).unwrap();
    assert!(encrypted(&s));
    let err = open(&with(&format!("sslmode=verify-ca&sslrootcert={other}"))).unwrap_err();
    assert!(err.to_string().contains("certificate"), "{err}");
    // require with a root certificate given checks the chain as verify-ca.
    assert!(open(&with(&format!("sslmode=require&sslrootcert={other}"))).is_err());

    // verify-full: the certificate must also name the host (it names
    // db.example, not 127.0.0.1).
    let err = open(&with(&format!("sslmode=verify-full&sslrootcert={root}"))).unwrap_err();
    assert!(err.to_string().contains("certificate"), "{err}");

    // A missing root file is a bad URL naming the file, before connecting.
    let err = open(&with("sslmode=verify-ca&sslrootcert=/nowhere/root.crt")).unwrap_err();
    assert!(matches!(err, StoreError::InvalidUrl { .. }), "{err:?}");
    assert!(err.to_string().contains("/nowhere/root.crt"), "{err}");
    // Client certificates are refused, not ignored.
    let err = open(&with("sslcert=/x.crt")).unwrap_err();
    assert!(err.to_string().contains("sslcert"), "{err}");
    let err = open(&with("sslmode=sometimes")).unwrap_err();
    assert!(err.to_string().contains("sslmode=sometimes"), "{err}");
}

/// verify-full passes when the certificate, signed by a certificate
/// authority in `sslrootcert`, names the host connected to; and fails for
/// a root that did not sign it.
#[test]
fn verify_full_accepts_a_ca_signed_certificate_for_the_host() {
    let dir = tempfile::tempdir().unwrap();
    let pair = match self_signed_cert(dir.path(), "ca", &["memtune test CA"])
        .and_then(|ca| {
            ca_signed_cert(dir.path(), &ca, "local", &["127.0.0.1", "localhost"]).map(|p| (ca, p))
        })
        .and_then(|(ca, p)| PgServer::start_tls(&p).map(|s| (ca, s)))
    {
        Ok(p) => p,
        Err(e) if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") => panic!("{e}"),
        Err(e) => {
            eprintln!("skipping: {e}");
            return;
        }
    };
    let (ca, server) = pair;
    let url = server.create_database("full").unwrap();
    let root = ca.cert.display();
    for host in ["127.0.0.1", "localhost"] {
        let url = url.replace("127.0.0.1", host);
        let s = open(&format!("{url}?sslmode=verify-full&sslrootcert={root}"))
            .unwrap_or_else(|e| panic!("{host}: {e}"));
        assert!(encrypted(&s));
    }
    let stranger = self_signed_cert(dir.path(), "stranger", &["memtune other CA"]).unwrap();
    let err = open(&format!(
        "{url}?sslmode=verify-ca&sslrootcert={}",
        stranger.cert.display()
    ))
    .unwrap_err();
    assert!(err.to_string().contains("certificate"), "{err}");
}
