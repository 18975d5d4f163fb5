//! The packing simulation's table (run by `cargo xtask bench packing`).
//!
//! `packing_sim [--seeds N] [--hours H] [--slack F] [--threads T]
//! [--plan-cache FILE] [--check-plans] [--sensitivity] [--devices N]`
//!
//! `--plan-cache`: the plans' coefficients are kept in FILE (JSON), keyed by
//! a fingerprint of the models and of the trainer's plan (full plans of a
//! small BERT and a small DeBERTa), so a second run builds no plan.
//!
//! Prints, per seed and policy: trials completed per hour, trials lost to
//! OOM, mean memory utilisation and concurrency; then the totals with the
//! baseline at the given fragmentation slack and at zero slack, and the
//! ratio. `--check-plans` first compares the runner's pricing
//! (`trainer::memory::step_curve`) with full memory plans of every model of the
//! space, with the time each takes; `--sensitivity` adds the ratio under
//! other assumptions; `--devices N` adds packing on N such devices (one
//! runner placing trials over all of them) against N times one device.

use std::time::Instant;

use cli::tune::packing::{FitPolicy, GIB};
use cli::tune::simulate::plans::PeakTable;
use cli::tune::simulate::{
    Policy, Sharing, SimParams, SimReport, SimSpace, sim_head, simulate, space,
};
use trainer::memory::{AffinePeak, PeakCurve, PlanRequest, plan_peak, step_curve};

fn main() {
    if let Err(e) = run() {
        eprintln!("packing_sim: {e}");
        std::process::exit(2);
    }
}

struct Args {
    seeds: u64,
    hours: f64,
    slack: f64,
    threads: usize,
    check_plans: bool,
    sensitivity: bool,
    plan_cache: Option<std::path::PathBuf>,
    devices: Option<usize>,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        seeds: 5,
        hours: 6.0,
        slack: SimParams::default().fragmentation_slack,
        threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
        check_plans: false,
        sensitivity: false,
        plan_cache: None,
        devices: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match flag.as_str() {
            "--seeds" => a.seeds = num(&value("--seeds")?)?,
            "--hours" => a.hours = num(&value("--hours")?)?,
            "--slack" => a.slack = num(&value("--slack")?)?,
            "--threads" => a.threads = num(&value("--threads")?)?,
            "--plan-cache" => a.plan_cache = Some(value("--plan-cache")?.into()),
            "--check-plans" => a.check_plans = true,
            "--sensitivity" => a.sensitivity = true,
            "--devices" => a.devices = Some(num(&value("--devices")?)?),
            other => return Err(format!("unknown argument '{other}'")),
        }
    }
    if a.seeds == 0 || a.hours <= 0.0 || a.slack < 0.0 || a.devices == Some(0) {
        return Err("--seeds, --hours and --devices must be positive, --slack not negative".into());
    }
    Ok(a)
}

fn num<T: std::str::FromStr>(s: &str) -> Result<T, String> {
    s.parse().map_err(|_| format!("bad number '{s}'"))
}

fn run() -> Result<(), String> {
    let args = parse()?;
    if args.check_plans {
        check_plans()?;
    }
    let t = Instant::now();
    let cached = args
        .plan_cache
        .as_deref()
        .map(read_cache)
        .unwrap_or_default();
    let from_cache = cached.entries().len();
    let space = SimSpace::build(cached, args.threads)?;
    println!(
        "memory plans of {} models x {} lengths: {} from cache, the rest built, in {:.1} s",
        space::MODELS.len(),
        space::SEQ_LENS.len(),
        from_cache,
        t.elapsed().as_secs_f64()
    );
    if let Some(path) = &args.plan_cache {
        write_cache(path, space.peaks())?;
    }
    let params = SimParams {
        horizon_s: args.hours * 3600.0,
        fragmentation_slack: args.slack,
        ..SimParams::default()
    };
    print_params(&params);
    let seeds: Vec<u64> = (1..=args.seeds).collect();
    let zero_slack = SimParams {
        fragmentation_slack: 0.0,
        ..params.clone()
    };
    let mut rows = Vec::new();
    for &seed in &seeds {
        rows.push(("", simulate(&params, &space, Policy::Baseline, seed)));
        rows.push((
            " (0 slack)",
            simulate(&zero_slack, &space, Policy::Baseline, seed),
        ));
        rows.push(("", simulate(&params, &space, Policy::Packing, seed)));
    }
    println!();
    println!(
        "| seed | policy | completed/h | lost to OOM | wasted trial-h | useful work (device-h/h) | mean memory util | max memory (GiB) | mean concurrency | mean compute util |"
    );
    println!("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for (suffix, r) in &rows {
        println!(
            "| {} | {}{} | {:.2} | {} | {:.2} | {:.3} | {:.1}% | {:.2} | {:.2} | {:.1}% |",
            r.seed,
            r.policy.name(),
            suffix,
            r.completed_per_hour(),
            r.lost_oom,
            r.wasted_s / 3600.0,
            r.useful_device_hours_per_hour(params.device_flops),
            100.0 * r.mean_memory_utilisation,
            r.max_memory as f64 / GIB as f64,
            r.mean_concurrency,
            100.0 * r.mean_compute_utilisation,
        );
    }
    let pick = |suffix: &str, policy: Policy| -> Vec<&SimReport> {
        rows.iter()
            .filter(|(s, r)| *s == suffix && r.policy == policy)
            .map(|(_, r)| r)
            .collect()
    };
    println!();
    println!(
        "Whole space, {} seeds x {} h (means per run; lost: total):",
        seeds.len(),
        args.hours
    );
    summary_table(
        &params,
        &[
            (
                format!("fixed PAR=2, slack {}", params.fragmentation_slack),
                summary(&pick("", Policy::Baseline), params.device_flops),
            ),
            (
                "fixed PAR=2, slack 0".to_string(),
                summary(&pick(" (0 slack)", Policy::Baseline), params.device_flops),
            ),
            (
                "packing".to_string(),
                summary(&pick("", Policy::Packing), params.device_flops),
            ),
        ],
    );

    // The same comparison on the trials the baseline can run alone.
    let fitting = SimParams {
        only_fitting_alone: true,
        ..params.clone()
    };
    let fitting0 = SimParams {
        fragmentation_slack: 0.0,
        ..fitting.clone()
    };
    let runs = |p: &SimParams, policy: Policy| -> Summary {
        let rs: Vec<SimReport> = seeds
            .iter()
            .map(|&s| simulate(p, &space, policy, s))
            .collect();
        let refs: Vec<&SimReport> = rs.iter().collect();
        summary(&refs, p.device_flops)
    };
    println!();
    println!("Only the sampled trials that fit the device alone at their batch size:");
    summary_table(
        &params,
        &[
            (
                format!("fixed PAR=2, slack {}", params.fragmentation_slack),
                runs(&fitting, Policy::Baseline),
            ),
            (
                "fixed PAR=2, slack 0".to_string(),
                runs(&fitting0, Policy::Baseline),
            ),
            ("packing".to_string(), runs(&fitting, Policy::Packing)),
        ],
    );
    if args.sensitivity {
        sensitivity(&space, &params, &seeds);
    }
    if let Some(n) = args.devices {
        devices_table(&space, &params, &seeds, n);
    }
    Ok(())
}

/// Packing on one device and on `n` copies of it, driven as the runner
/// drives them (one queue, trials placed over every device): the useful
/// work of `n` devices against `n` times that of one.
fn devices_table(space: &SimSpace, params: &SimParams, seeds: &[u64], n: usize) {
    let one = params.devices[0];
    let on = |devices: Vec<u64>| -> (Summary, f64, f64) {
        let p = SimParams {
            devices,
            ..params.clone()
        };
        let rs: Vec<SimReport> = seeds
            .iter()
            .map(|&s| simulate(&p, space, Policy::Packing, s))
            .collect();
        let busy = rs.iter().flat_map(|r| r.devices.iter().map(|d| d.training));
        let (lo, hi) = busy.fold((f64::INFINITY, 0.0f64), |(lo, hi), u| {
            (lo.min(u), hi.max(u))
        });
        let refs: Vec<&SimReport> = rs.iter().collect();
        (summary(&refs, p.device_flops), lo, hi)
    };
    let single = on(vec![one]);
    let many = on(vec![one; n]);
    println!();
    println!(
        "Packing on {n} devices of {:.2} GiB (one runner, one queue) against one device, {} seeds:",
        one as f64 / GIB as f64,
        seeds.len()
    );
    println!(
        "| devices | completed/h | lost to OOM | useful work (device-h/h) | time training per device (min, max) | useful work / (devices x one device's) |"
    );
    println!("| ---: | ---: | ---: | ---: | --- | ---: |");
    for (count, (s, lo, hi)) in [(1, &single), (n, &many)] {
        println!(
            "| {count} | {:.2} | {} | {:.3} | {:.1}%, {:.1}% | {:.3} |",
            s.per_hour,
            s.lost,
            s.useful,
            100.0 * lo,
            100.0 * hi,
            s.useful / (count as f64 * single.0.useful),
        );
    }
}

/// Prints the summaries and the ratios of the last (packing) to the others.
fn summary_table(params: &SimParams, rows: &[(String, Summary)]) {
    println!(
        "| policy | completed/h | lost to OOM | useful work (device-h/h) | mean memory util | mean concurrency | packing / this, completed/h | packing / this, useful work |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    let ours = &rows.last().expect("packing row").1;
    for (name, s) in rows {
        println!(
            "| {name} | {:.2} | {} | {:.3} | {:.1}% | {:.2} | {:.2}x | {:.2}x |",
            s.per_hour,
            s.lost,
            s.useful,
            100.0 * s.memory,
            s.concurrency,
            ours.per_hour / s.per_hour,
            ours.useful / s.useful,
        );
    }
    let _ = params;
}

struct Summary {
    per_hour: f64,
    useful: f64,
    lost: usize,
    memory: f64,
    concurrency: f64,
}

fn summary(rs: &[&SimReport], device_flops: f64) -> Summary {
    let n = rs.len() as f64;
    Summary {
        per_hour: rs.iter().map(|r| r.completed_per_hour()).sum::<f64>() / n,
        useful: rs
            .iter()
            .map(|r| r.useful_device_hours_per_hour(device_flops))
            .sum::<f64>()
            / n,
        lost: rs.iter().map(|r| r.lost_oom).sum(),
        memory: rs.iter().map(|r| r.mean_memory_utilisation).sum::<f64>() / n,
        concurrency: rs.iter().map(|r| r.mean_concurrency).sum::<f64>() / n,
    }
}

fn print_params(p: &SimParams) {
    println!(
        "device(s) {:?} GiB, {:.0} TFLOP/s achieved, half utilisation at {} tokens/step, {:?} sharing, \
         start-up {} s, process overhead {} MiB; packing: margin {} MiB, <= {} workers, {:?}, \
         token floor {:?}, token cap {:?}; baseline: PAR={}, fragmentation slack {}",
        p.devices
            .iter()
            .map(|&c| (c as f64 / GIB as f64 * 100.0).round() / 100.0)
            .collect::<Vec<_>>(),
        p.device_flops / 1e12,
        p.half_tokens,
        p.sharing,
        p.startup_s,
        p.process_overhead >> 20,
        p.safety_margin >> 20,
        p.max_workers,
        p.fit_policy,
        p.micro_token_floor,
        p.micro_token_cap,
        p.baseline_parallel,
        p.fragmentation_slack
    );
}

/// The ratio (packing over baseline, completed per hour) when one
/// assumption changes.
fn sensitivity(space: &SimSpace, base: &SimParams, seeds: &[u64]) {
    let ratio = |p: &SimParams| {
        let run = |policy| {
            let rs: Vec<SimReport> = seeds
                .iter()
                .map(|&s| simulate(p, space, policy, s))
                .collect();
            let refs: Vec<&SimReport> = rs.iter().collect();
            summary(&refs, p.device_flops)
        };
        let (b, o) = (run(Policy::Baseline), run(Policy::Packing));
        (b, o)
    };
    let mut variants: Vec<(String, SimParams)> = vec![("as above".into(), base.clone())];
    let mut add = |name: &str, change: &dyn Fn(&mut SimParams)| {
        let mut p = base.clone();
        change(&mut p);
        variants.push((name.to_string(), p));
    };
    add("packing: no token floor", &|p| p.micro_token_floor = 0);
    add("packing: token floor 2048", &|p| p.micro_token_floor = 2048);
    add("packing: token floor 8192", &|p| p.micro_token_floor = 8192);
    add("packing: fit policy Alone", &|p| {
        p.fit_policy = FitPolicy::Alone
    });
    add("side by side (MPS)", &|p| p.sharing = Sharing::Concurrent);
    add("side by side (MPS), no token floor", &|p| {
        p.sharing = Sharing::Concurrent;
        p.micro_token_floor = 0
    });
    add("packing: token cap 8192", &|p| {
        p.micro_token_cap = Some(8192)
    });
    add("packing: max workers 4", &|p| p.max_workers = 4);
    add("packing: margin 2 GiB", &|p| p.safety_margin = 2 * GIB);
    add("half tokens 256", &|p| p.half_tokens = 256.0);
    add("half tokens 4096", &|p| p.half_tokens = 4096.0);
    add("half tokens 4096, no token floor", &|p| {
        p.half_tokens = 4096.0;
        p.micro_token_floor = 0
    });
    add("start-up 0 s", &|p| p.startup_s = 0.0);
    add("start-up 60 s", &|p| p.startup_s = 60.0);
    add("baseline PAR=3", &|p| p.baseline_parallel = 3);
    add("baseline PAR=1", &|p| p.baseline_parallel = 1);
    add("overhead 300 MiB", &|p| p.process_overhead = 300 << 20);
    add("device 32 GiB", &|p| p.devices = vec![32 * GIB]);
    add("device 80 GiB", &|p| p.devices = vec![80 * GIB]);
    add("only trials fitting alone", &|p| {
        p.only_fitting_alone = true
    });
    println!();
    println!("Sensitivity (whole space unless named; baseline PAR=2 unless named):");
    println!(
        "| variant | fixed PAR completed/h | lost | packing completed/h | lost | ratio completed/h | ratio useful work |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    for (name, p) in variants {
        let (b, o) = ratio(&p);
        println!(
            "| {name} | {:.2} | {} | {:.2} | {} | {:.2}x | {:.2}x |",
            b.per_hour,
            b.lost,
            o.per_hour,
            o.lost,
            o.per_hour / b.per_hour,
            o.useful / b.useful
        );
    }
}

/// The runner's pricing against full memory plans at a few points, with
/// the time each takes.
fn check_plans() -> Result<(), String> {
    let head = sim_head();
    for (model, micro, seq) in [
        ("bert-base", 32, 128),
        ("roberta-base", 12, 512),
        ("bert-large", 8, 512),
        ("roberta-large", 8, 384),
        ("xlm-roberta-base", 16, 256),
        ("deberta-v3-base", 16, 256),
        ("deberta-v3-large", 8, 384),
    ] {
        let config = space::model_config(model).expect("a model of the space");
        let at = |e: &dyn std::fmt::Display| format!("{model} at length {seq}: {e}");
        let t = Instant::now();
        let full = plan_peak(&config, &head, seq, micro).map_err(|e| at(&e))?;
        let full_s = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let curve =
            step_curve(&PlanRequest::fp32_adamw(&config, &head, 1, seq)).map_err(|e| at(&e))?;
        let curve_s = t.elapsed().as_secs_f64();
        let fast = curve.at(micro);
        // What the five reduced plans alone would say (exact for the
        // BERT-shaped families only).
        let reduced = AffinePeak::from_reduced_plans(&config, &head, seq)
            .map_err(|e| at(&e))?
            .at(micro);
        println!(
            "plan check {model} micro {micro} seq {seq}: full plan {full} bytes ({full_s:.2} s), \
             runner's pricing {fast} bytes ({} piece(s), {curve_s:.2} s for every micro-batch), \
             difference {}; five reduced plans alone: difference {}",
            curve.pieces().len(),
            full as i128 - fast as i128,
            full as i128 - reduced as i128
        );
    }
    Ok(())
}

/// What the cached coefficients depend on: the models of the space and the
/// trainer's plan code (full plans of a small BERT and a small DeBERTa,
/// milliseconds).
fn fingerprint() -> Result<String, String> {
    let head = sim_head();
    let small = trainer::config::BertConfig::tiny(32, 2, 4, 64, 50);
    let deberta = trainer::model::deberta::DebertaConfig {
        vocab_size: 50,
        hidden_size: 32,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        intermediate_size: 64,
        position_buckets: 8,
        max_relative_positions: 32,
        ..trainer::model::deberta::DebertaConfig::deberta_v3_base()
    };
    let probes: Vec<u64> = [(3, 16), (5, 24)]
        .iter()
        .flat_map(|&(m, s)| {
            [
                plan_peak(&small, &head, s, m),
                plan_peak(&deberta, &head, s, m),
            ]
        })
        .collect::<Result<_, _>>()
        .map_err(|e| format!("fingerprint plans: {e}"))?;
    let models: Vec<String> = space::MODELS
        .iter()
        .map(|m| format!("{:?}", space::model_config(m)))
        .collect();
    Ok(format!("{probes:?} {head:?} {models:?}"))
}

fn read_cache(path: &std::path::Path) -> PeakTable {
    let mut table = PeakTable::new();
    let Ok(text) = std::fs::read_to_string(path) else {
        return table;
    };
    let Ok(json) = serde_json::from_str::<serde_json::Value>(&text) else {
        return table;
    };
    let Ok(fingerprint) = fingerprint() else {
        return table;
    };
    if json["fingerprint"].as_str() != Some(fingerprint.as_str()) {
        return table;
    }
    let number = |v: &serde_json::Value| v.as_str().and_then(|s| s.parse::<i128>().ok());
    for e in json["entries"].as_array().into_iter().flatten() {
        let (Some(model), Some(seq)) = (e["model"].as_str(), e["seq_len"].as_u64()) else {
            continue;
        };
        let pieces: Option<Vec<AffinePeak>> = e["pieces"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| {
                Some(AffinePeak {
                    fixed: number(&p["fixed"])?,
                    per_row: number(&p["per_row"])?,
                })
            })
            .collect();
        // An unreadable entry is built again.
        if let Some(curve) = pieces.and_then(PeakCurve::envelope) {
            table.insert(model, seq as usize, curve);
        }
    }
    table
}

fn write_cache(path: &std::path::Path, table: &PeakTable) -> Result<(), String> {
    let entries: Vec<serde_json::Value> = table
        .entries()
        .into_iter()
        .map(|(model, seq_len, curve)| {
            let pieces: Vec<serde_json::Value> = curve
                .pieces()
                .iter()
                .map(|p| serde_json::json!({"fixed": p.fixed.to_string(), "per_row": p.per_row.to_string()}))
                .collect();
            serde_json::json!({"model": model, "seq_len": seq_len, "pieces": pieces})
        })
        .collect();
    let json = serde_json::json!({"fingerprint": fingerprint()?, "entries": entries});
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    std::fs::write(path, json.to_string()).map_err(|e| format!("{}: {e}", path.display()))
}
