//! Negative numbers in every form Python prints, as option values.
//!
//! clap takes `-1.5` as a value but not `-1e-05`, `-inf` or `-nan`: it
//! sees a short flag. Ask/tell loops pass whatever `repr(float)` printed,
//! so before parsing, each argument that is a number beginning with `-` is
//! attached to the option it follows with `=` (`--values -1e-05` becomes
//! `--values=-1e-05`; a later value of a multi-valued option becomes
//! another `--values=…`, which clap appends). Once a value of an option
//! that takes several is attached, its later values are attached too
//! (`--values -1 2` becomes `--values=-1 --values=2`: clap takes no values
//! by position after an attached one). No memtune flag spells a number, so
//! nothing else changes meaning.

use std::ffi::OsString;

/// The command line with every negative number attached to its option;
/// `multi_valued` says which long options (`--values`) take several values.
pub fn attach_negative_numbers(
    args: impl IntoIterator<Item = OsString>,
    multi_valued: impl Fn(&str) -> bool,
) -> Vec<OsString> {
    let mut out: Vec<OsString> = Vec::new();
    // The long option the next values belong to, and whether its values
    // are attached from here on.
    let mut option: Option<String> = None;
    let mut attached = false;
    let mut after_escape = false;
    for arg in args {
        let text = arg.to_str();
        if after_escape {
            out.push(arg);
            continue;
        }
        match text {
            Some("--") => {
                after_escape = true;
                option = None;
                attached = false;
                out.push(arg);
            }
            Some(t) if is_negative_number(t) => match &option {
                Some(name) => {
                    if out.last().and_then(|a| a.to_str()) == Some(name.as_str()) {
                        out.pop();
                    }
                    out.push(format!("{name}={t}").into());
                    attached = multi_valued(name.trim_start_matches('-'));
                }
                None => out.push(arg),
            },
            Some(t) if t.starts_with("--") => {
                // `--opt=value` takes no further values by position.
                option = (!t.contains('=')).then(|| t.to_string());
                attached = false;
                out.push(arg);
            }
            Some(t) if t.starts_with('-') && t.len() > 1 => {
                option = None;
                attached = false;
                out.push(arg);
            }
            Some(t) if attached => {
                let name = option.as_deref().unwrap_or_default();
                out.push(format!("{name}={t}").into());
            }
            _ => out.push(arg),
        }
    }
    out
}

/// `-` followed by what Rust's (and Python's) float parsing accepts:
/// digits, a fraction, an exponent, `inf`, `infinity` or `nan`.
fn is_negative_number(t: &str) -> bool {
    t.len() > 1
        && t.starts_with('-')
        && t[1..].parse::<f64>().is_ok()
        && !t[1..].starts_with(['+', '-'])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attach(args: &[&str]) -> Vec<String> {
        attach_negative_numbers(args.iter().map(OsString::from), |name| name == "values")
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect()
    }

    #[test]
    fn negative_numbers_join_their_option() {
        assert_eq!(
            attach(&[
                "tell",
                "--trial-number",
                "-1",
                "--values",
                "2",
                "-1e-05",
                "-inf",
                "--state",
                "complete"
            ]),
            [
                "tell",
                "--trial-number=-1",
                "--values",
                "2",
                "--values=-1e-05",
                "--values=-inf",
                "--state",
                "complete"
            ]
        );
        assert_eq!(attach(&["--values", "-nan"]), ["--values=-nan"]);
        // After an attached first value, the rest of a multi-valued option's
        // values are attached too; a single-valued option's are not.
        assert_eq!(
            attach(&["--values", "-1", "2", "-inf", "3", "--state", "complete"]),
            [
                "--values=-1",
                "--values=2",
                "--values=-inf",
                "--values=3",
                "--state",
                "complete"
            ]
        );
        assert_eq!(
            attach(&["--trial-number", "-1", "2"]),
            ["--trial-number=-1", "2"]
        );
        assert_eq!(
            attach(&["--values", "-1", "-q", "2"]),
            ["--values=-1", "-q", "2"]
        );
        assert_eq!(attach(&["ask", "-f", "json"]), ["ask", "-f", "json"]);
        // After `--`, and without a preceding option, nothing changes.
        assert_eq!(attach(&["--", "-1"]), ["--", "-1"]);
        assert_eq!(attach(&["-1e-05"]), ["-1e-05"]);
        assert_eq!(attach(&["--x=1", "-2"]), ["--x=1", "-2"]);
    }

    #[test]
    fn only_numbers_are_numbers() {
        for t in [
            "-1",
            "-0.0",
            "-1.6185280968878197e-05",
            "-1e+300",
            "-inf",
            "-nan",
            "-Infinity",
            "-.5",
        ] {
            assert!(is_negative_number(t), "{t}");
        }
        for t in ["-", "--1", "-+1", "-f", "-x1", "1", "-1e", "-in"] {
            assert!(!is_negative_number(t), "{t}");
        }
    }
}
