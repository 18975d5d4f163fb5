//! Replay an allocation trace through no caching, classic caching and
//! expandable segments on a simulated 80 GiB device, and print a table.
//!
//! ```sh
//! cargo run -p gpu-mem --release --example replay            # generated BERT trace
//! cargo run -p gpu-mem --release --example replay -- t.jsonl # a recorded trace
//! cargo run -p gpu-mem --release --example replay -- --write t.jsonl  # save the generated one
//! ```

use gpu_mem::error::human_bytes;
use gpu_mem::trace::{self, bert::BertTraceSpec};
use gpu_mem::{Config, SimDevice};
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let records = match args.as_slice() {
        [] => BertTraceSpec::default().generate(),
        [flag, path] if flag == "--write" => {
            let records = BertTraceSpec::default().generate();
            let file = match std::fs::File::create(path) {
                Ok(f) => f,
                Err(e) => {
                    eprintln!("cannot create {path}: {e}");
                    return ExitCode::FAILURE;
                }
            };
            if let Err(e) = trace::write(&records, std::io::BufWriter::new(file)) {
                eprintln!("cannot write {path}: {e}");
                return ExitCode::FAILURE;
            }
            records
        }
        [path] => match trace::read_file(path.as_ref()) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::FAILURE;
            }
        },
        _ => {
            eprintln!("usage: replay [TRACE.jsonl | --write TRACE.jsonl]");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "{} records, simulated 80 GiB device with 2 MiB pages\n",
        records.len()
    );
    println!(
        "| configuration | peak requested | peak allocated | peak reserved | reserved / requested | max reserved-unallocated | frag. at peak | device allocs | device frees | OOMs |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for (name, config) in [
        ("no caching", Config::no_caching()),
        ("classic caching", Config::default()),
        ("expandable segments", Config::expandable()),
    ] {
        match trace::replay(&records, config, SimDevice::h100()) {
            Ok(r) => println!(
                "| {name} | {} | {} | {} | {:.3} | {} | {:.3} | {} | {} | {} |",
                human_bytes(r.peak_requested),
                human_bytes(r.peak_allocated),
                human_bytes(r.peak_reserved),
                r.reserved_over_requested,
                human_bytes(r.max_reserved_unallocated),
                r.fragmentation_at_peak,
                r.num_device_alloc,
                r.num_device_free,
                r.num_ooms,
            ),
            Err(e) => {
                eprintln!("{name}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}
