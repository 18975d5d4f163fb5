//! 16-bit matrix products on the CPU reference backend: each product is
//! the exact product of rounded operands, a fine-tune at bf16 or fp16
//! follows the fp32 one with the same memory, and fp16's loss scaling skips
//! the updates whose gradients overflow and backs off.

mod common;

use common::{Rand, random_batch, rel_err, time_seed};
use trainer::backend::cpu::CpuBackend;
use trainer::backend::{Backend, MatmulPrecision, MatmulShape};
use trainer::batch::Batch;
use trainer::config::BertConfig;
use trainer::finetune::finetune_cpu;
use trainer::memory::BufKind;
use trainer::model::{BertClassifier, HeadConfig};
use trainer::testing::{sentiment_words, tiny_config, write_tiny_model};
use trainer::train::{
    Control, LossScaleConfig, LossScaler, OptimizerConfig, StepContext, TrainConfig, train,
    train_step,
};

/// `C = A B` on the backend at `precision`, and the f64 product of the
/// operands rounded as that precision reads them.
fn product(precision: MatmulPrecision, s: &MatmulShape, a: &[f64], b: &[f64]) -> [Vec<f64>; 2] {
    let be = CpuBackend::<f32>::new().with_matmul_precision(precision);
    let upload = |v: &[f64]| {
        let mut buf = be.alloc("x", BufKind::Activation, v.len());
        be.upload(&mut buf, v);
        buf
    };
    let (a_buf, b_buf) = (upload(a), upload(b));
    let mut c = be.alloc("c", BufKind::Activation, s.batch * s.m * s.n);
    be.matmul(s, 1.0, &a_buf, &b_buf, 0.0, &mut c);
    // The operands as f32 buffers hold them, then as the product reads them.
    let read = |v: &[f64]| -> Vec<f64> {
        v.iter()
            .map(|&x| precision.round(x as f32) as f64)
            .collect()
    };
    let (a, b) = (read(a), read(b));
    let mut want = vec![0.0; s.batch * s.m * s.n];
    for e in 0..s.batch {
        for i in 0..s.m {
            for j in 0..s.n {
                want[(e * s.m + i) * s.n + j] = (0..s.k)
                    .map(|l| a[(e * s.m + i) * s.k + l] * b[(e * s.k + l) * s.n + j])
                    .sum();
            }
        }
    }
    [be.download(&c), want]
}

#[test]
fn a_16_bit_product_is_the_exact_product_of_rounded_operands_accumulated_in_fp32() {
    let seed = time_seed();
    let mut r = Rand::new(seed, 1);
    let s = MatmulShape {
        batch: 2,
        m: 7,
        n: 5,
        k: 96,
        trans_a: false,
        trans_b: false,
    };
    let a = r.normals(s.batch * s.m * s.k);
    let b = r.normals(s.batch * s.k * s.n);
    let [fp32, exact] = product(MatmulPrecision::Fp32, &s, &a, &b);
    for p in [MatmulPrecision::Bf16, MatmulPrecision::Fp16] {
        let [got, want] = product(p, &s, &a, &b);
        // Only fp32 accumulation separates them.
        let err = rel_err(&got, &want);
        assert!(err < 1e-6, "{p} seed {seed}: {err:e}");
        // And the rounding is real: the fp32 product is far from it.
        let off = rel_err(&fp32, &want);
        let floor = if p == MatmulPrecision::Bf16 {
            1e-3
        } else {
            1e-4
        };
        assert!(off > floor, "{p} seed {seed}: fp32 only {off:e} away");
    }
    assert!(rel_err(&fp32, &exact) < 1e-6, "seed {seed}");

    // fp16 ends at 65504: a larger operand is infinite, as on a tensor core.
    let mut big = a.clone();
    big[0] = 70000.0;
    let [got, _] = product(MatmulPrecision::Fp16, &s, &big, &b);
    assert!(
        got[..s.n].iter().all(|v| v.is_infinite()),
        "{:?}",
        &got[..s.n]
    );
    let [got, _] = product(MatmulPrecision::Bf16, &s, &big, &b);
    assert!(got.iter().all(|v| v.is_finite()));
}

#[test]
fn bf16_and_fp16_fine_tunes_follow_fp32_with_the_same_memory() {
    let dir = tempfile::tempdir().unwrap();
    let words = sentiment_words(600);
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    write_tiny_model(dir.path(), &tiny_config(), &words, 5).unwrap();
    let run = |precision| {
        let spec = trainer::finetune::FinetuneSpec {
            matmul_precision: precision,
            ..common::tiny_finetune_spec(dir.path(), common::embedded())
        };
        finetune_cpu(&spec, &mut |_| Control::Continue).unwrap()
    };
    let fp32 = run(MatmulPrecision::Fp32);
    for p in [MatmulPrecision::Bf16, MatmulPrecision::Fp16] {
        let out = run(p);
        let losses = |o: &trainer::finetune::FinetuneOutcome| -> Vec<f64> {
            o.report.epochs.iter().map(|e| e.train_loss).collect()
        };
        let (a, b) = (losses(&fp32), losses(&out));
        eprintln!(
            "{p}: train losses {b:?} (fp32 {a:?}), accuracy {:.3} (fp32 {:.3}), skipped {}",
            out.report.epochs.last().unwrap().valid.accuracy,
            fp32.report.epochs.last().unwrap().valid.accuracy,
            out.report.skipped_steps,
        );
        for (x, y) in a.iter().zip(&b) {
            assert!((x - y).abs() <= 0.05 * x.abs(), "{p}: {b:?} vs fp32 {a:?}");
        }
        let acc =
            |o: &trainer::finetune::FinetuneOutcome| o.report.epochs.last().unwrap().valid.accuracy;
        assert!((acc(&out) - acc(&fp32)).abs() <= 0.03, "{p}");
        // Products change arithmetic, not storage.
        assert_eq!(out.peak_bytes, fp32.peak_bytes, "{p}");
        assert_eq!(out.allocation_requests, fp32.allocation_requests, "{p}");
        if p == MatmulPrecision::Bf16 {
            assert_eq!(out.report.skipped_steps, 0);
        }
        assert!(out.report.skipped_steps <= out.report.steps / 10, "{p}");
    }
    assert_eq!(fp32.report.skipped_steps, 0);
}

/// A tiny classifier's parameters, flattened.
fn parameters(model: &BertClassifier<CpuBackend<f32>>) -> Vec<f32> {
    model
        .params
        .values
        .iter()
        .flat_map(|v| v.data.clone())
        .collect()
}

fn marked_batch(seed: u64) -> Batch {
    let mut r = Rand::new(seed, 3);
    let (batch, seq) = (8, 12);
    Batch {
        batch,
        seq,
        input_ids: (0..batch * seq).map(|_| 4 + r.below(16) as u32).collect(),
        token_type_ids: vec![0; batch * seq],
        attention_mask: vec![1; batch * seq],
        labels: (0..batch).map(|_| r.below(2)).collect(),
    }
}

#[test]
fn fp16_loss_scaling_skips_overflowed_updates_and_backs_off_until_one_applies() {
    let seed = time_seed();
    let config = BertConfig::tiny(32, 2, 4, 64, 20);
    let head = HeadConfig {
        num_labels: 2,
        hidden: vec![],
    };
    let batch = marked_batch(seed);
    let context = |be: &CpuBackend<f32>, model: &mut BertClassifier<CpuBackend<f32>>| {
        StepContext::new(
            be,
            model,
            OptimizerConfig::default(),
            None,
            Some(1.0),
            false,
            seed,
        )
    };

    let fp32 = CpuBackend::<f32>::new();
    let mut model = BertClassifier::new_random(&fp32, &config, &head, seed).unwrap();
    assert!(context(&fp32, &mut model).loss_scaler.is_none());

    let be = CpuBackend::<f32>::new().with_matmul_precision(MatmulPrecision::Fp16);
    let mut model = BertClassifier::new_random(&be, &config, &head, seed).unwrap();
    let mut ctx = context(&be, &mut model);
    assert_eq!(
        ctx.loss_scaler.as_ref().map(LossScaler::scale),
        Some(65536.0)
    );
    // A scale no fp16 gradient survives: dlogits alone are 2^40 / 8.
    ctx.loss_scaler = Some(
        LossScaler::new(LossScaleConfig {
            init_scale: 2f64.powi(40),
            growth_interval: 2000,
        })
        .unwrap(),
    );
    let before = parameters(&model);
    let mut skipped = 0;
    let applied_at = loop {
        let step = train_step(&be, &mut model, &mut ctx, &[&batch], 1e-3).unwrap();
        assert!(step.loss.is_finite(), "seed {seed}");
        let scale = ctx.loss_scaler.as_ref().unwrap().scale();
        if step.applied {
            break scale;
        }
        skipped += 1;
        assert_eq!(
            parameters(&model),
            before,
            "a skipped update changed weights"
        );
        assert_eq!(scale, 2f64.powi(40 - skipped), "seed {seed}");
        assert!(skipped < 40, "never applied (seed {seed})");
    };
    eprintln!(
        "skipped {skipped} steps; applied at scale 2^{}",
        applied_at.log2()
    );
    // 2^40 / 8 is past 65504 by far: several halvings were needed.
    assert!(skipped >= 20, "seed {seed}: skipped {skipped}");
    assert_eq!(
        ctx.loss_scaler.as_ref().unwrap().skipped_steps(),
        skipped as u64
    );
    assert_ne!(parameters(&model), before, "seed {seed}");
}

/// An fp16 update skipped for an overflowed gradient does not move the
/// learning-rate schedule, as Hugging Face's Trainer steps its scheduler
/// only after an applied update: the first applied update runs at the
/// schedule's first rate. One row the model gets confidently wrong
/// (classifier bias +10 on the other class) overflows the scaled gradient
/// at the initial scale 2^16, not at 2^15; with warm-up over both steps
/// the applied update's rate is 0, so no weight moves.
#[test]
fn a_skipped_fp16_step_does_not_advance_the_schedule() {
    let mut c = BertConfig::tiny(16, 1, 2, 32, 30);
    c.hidden_dropout_prob = 0.0;
    c.attention_probs_dropout_prob = 0.0;
    let h = HeadConfig {
        num_labels: 2,
        hidden: vec![],
    };
    let be = CpuBackend::<f32>::new().with_matmul_precision(MatmulPrecision::Fp16);
    let mut model = BertClassifier::new_random(&be, &c, &h, 3).unwrap();
    let bias = model.params.index_of("classifier.bias").unwrap();
    be.upload(&mut model.params.values[bias], &[10.0, 0.0]);
    let mut b = random_batch(&mut Rand::new(5, 1), &[6], 6, 30, 2);
    b.labels = vec![1];
    let data = vec![b.clone(), b];
    let cfg = TrainConfig {
        epochs: 1,
        lr: 1e-2,
        warmup_ratio: 1.0,
        shuffle: false,
        ..TrainConfig::default()
    };
    let before = parameters(&model);
    let report = train(&be, &mut model, &data, &data[..1], &cfg, &mut |_| {
        Control::Continue
    })
    .unwrap();
    assert_eq!((report.steps, report.skipped_steps), (2, 1));
    assert_eq!(parameters(&model), before);
}
