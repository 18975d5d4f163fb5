//! The fused step ([`Kernels::Fused`]) against the reference step on the
//! CPU backend: the same loss and the same gradient of every weight (BERT
//! and DeBERTa, dropout on and off, padded batches), the same parameters
//! after optimiser steps with the gradient clip active, and with 16-bit
//! activation storage a tiny task trained as well as in fp32.

mod common;

use std::path::Path;

use common::{Rand, random_batch};
use trainer::backend::cpu::CpuBackend;
use trainer::backend::{Backend, Kernels, MatmulPrecision};
use trainer::batch::Batch;
use trainer::config::BertConfig;
use trainer::float::Float;
use trainer::model::deberta::DebertaConfig;
use trainer::model::{Classifier, HeadConfig, Mode, ModelConfig};
use trainer::train::{OptimizerConfig, StepContext, train_step};

fn bert() -> ModelConfig {
    let mut c = BertConfig::tiny(32, 2, 4, 64, 40);
    c.hidden_dropout_prob = 0.2;
    c.attention_probs_dropout_prob = 0.2;
    c.into()
}

/// Relative attention with c2p and p2c, a normalised relative table and
/// token types, dropout on every site.
fn deberta() -> ModelConfig {
    let json = r#"{"model_type": "deberta-v2", "vocab_size": 40, "hidden_size": 24,
        "num_hidden_layers": 2, "num_attention_heads": 3, "intermediate_size": 40,
        "max_position_embeddings": 32, "type_vocab_size": 2, "relative_attention": true,
        "position_buckets": 4, "max_relative_positions": 8, "share_att_key": true,
        "pos_att_type": ["p2c", "c2p"], "norm_rel_ebd": "layer_norm",
        "position_biased_input": true, "hidden_dropout_prob": 0.2,
        "attention_probs_dropout_prob": 0.2, "pooler_dropout": 0.2, "cls_dropout": 0.2}"#;
    DebertaConfig::from_json(json, Path::new("tiny.json"))
        .unwrap()
        .into()
}

fn head(config: &ModelConfig) -> HeadConfig {
    let hidden = match config {
        ModelConfig::Bert(_) => vec![16],
        ModelConfig::Deberta(_) => vec![],
    };
    HeadConfig {
        num_labels: 3,
        hidden,
    }
}

fn backend<T: Float>(kernels: Kernels, precision: MatmulPrecision) -> CpuBackend<T> {
    CpuBackend::<T>::new().for_step(precision, kernels)
}

/// A model of `config` with weights larger than the initialisation's (so
/// attention is far from uniform and every gradient clearly non-zero), the
/// same for every backend.
fn model<'m, T: Float>(
    be: &'m CpuBackend<T>,
    config: &ModelConfig,
    seed: u64,
) -> Box<dyn Classifier<CpuBackend<T>> + 'm> {
    let mut model = config.build_random(be, &head(config), seed).unwrap();
    let mut r = Rand::new(seed, 7);
    let params = model.params_mut();
    for i in 0..params.info.len() {
        let values: Vec<f64> = r
            .normals(params.info[i].numel())
            .iter()
            .map(|v| 0.3 * v)
            .collect();
        be.upload(&mut params.values[i], &values);
    }
    model
}

/// Padded sequences (one with a single real token), labels of 3 classes.
fn batch(seed: u64, vocab: usize) -> Batch {
    let mut r = Rand::new(seed, 3);
    random_batch(&mut r, &[9, 4, 1, 7], 9, vocab, 3)
}

fn vocab(config: &ModelConfig) -> usize {
    match config {
        ModelConfig::Bert(c) => c.vocab_size,
        ModelConfig::Deberta(_) => 40,
    }
}

/// The loss and every gradient (host copies) of one forward and backward.
fn loss_and_grads<T: Float>(
    be: &CpuBackend<T>,
    config: &ModelConfig,
    batch: &Batch,
    mode: Mode,
) -> (f64, Vec<Vec<f64>>, Vec<String>) {
    let mut m = model(be, config, 11);
    // Allocates the (zeroed) gradients.
    let _ctx = StepContext::new(be, &mut *m, OptimizerConfig::Sgd, None, None, false, 0);
    let loss = m.train_batch(be, batch, None, 2.5, mode, false).unwrap();
    let p = m.params();
    let grads = p.grads.iter().map(|g| be.download(g)).collect();
    let names = p.info.iter().map(|i| i.name.clone()).collect();
    (loss, grads, names)
}

/// `|a - b| / |b|` over the whole tensor (L2).
fn rel_err(a: &[f64], b: &[f64]) -> f64 {
    let diff: f64 = a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum();
    let norm: f64 = b.iter().map(|y| y * y).sum();
    (diff / norm.max(f64::MIN_POSITIVE)).sqrt()
}

/// Fused against reference in `T`: loss within `tol` relatively, every
/// gradient tensor within `tol` (L2, relative). Returns the worst error.
fn compare_gradients<T: Float>(config: &ModelConfig, dropout: bool, tol: f64) -> f64 {
    let family = match config {
        ModelConfig::Bert(_) => "bert",
        ModelConfig::Deberta(_) => "deberta",
    };
    let config = if dropout {
        config.clone()
    } else {
        config.with_dropout(0.0)
    };
    let batch = batch(5, vocab(&config));
    let mode = Mode::Train { seed: 3, step: 2 };
    let reference = backend::<T>(Kernels::Reference, MatmulPrecision::Fp32);
    let fused = backend::<T>(Kernels::Fused, MatmulPrecision::Fp32);
    let (loss_r, grads_r, names) = loss_and_grads(&reference, &config, &batch, mode);
    let (loss_f, grads_f, _) = loss_and_grads(&fused, &config, &batch, mode);
    let what = format!("{family} {} dropout {dropout}", T::NAME);
    assert!(loss_r.is_finite() && loss_r > 0.0, "{what}: loss {loss_r}");
    let loss_err = (loss_f - loss_r).abs() / loss_r;
    assert!(loss_err < tol, "{what}: loss {loss_f} vs {loss_r}");
    let mut worst = loss_err;
    // The keys' bias has an exactly-zero gradient (softmax ignores a
    // constant added to a row of scores): both paths return rounding
    // noise there, compared against a floor of the gradient's overall size.
    let total: f64 = grads_r.iter().flatten().map(|g| g * g).sum::<f64>().sqrt();
    let floor = 1e-6 * total;
    for ((f, r), name) in grads_f.iter().zip(&grads_r).zip(&names) {
        let norm = |g: &[f64]| g.iter().map(|g| g * g).sum::<f64>().sqrt();
        if name.contains("key.bias") {
            let (nf, nr) = (norm(f), norm(r));
            assert!(
                nf < floor && nr < floor,
                "{what}: {name} is {nf:.2e}/{nr:.2e}, not 0"
            );
            continue;
        }
        assert!(norm(r) > floor, "{what}: {name} has no gradient");
        let e = rel_err(f, r);
        assert!(e < tol, "{what}: {name} differs by {e:.2e}");
        worst = worst.max(e);
    }
    println!("{what}: loss {loss_r:.6}, worst relative error {worst:.2e}");
    worst
}

#[test]
fn bert_fused_gradients_equal_the_reference() {
    for dropout in [false, true] {
        compare_gradients::<f64>(&bert(), dropout, 1e-10);
        compare_gradients::<f32>(&bert(), dropout, 1e-4);
    }
}

#[test]
fn deberta_fused_gradients_equal_the_reference() {
    for dropout in [false, true] {
        compare_gradients::<f64>(&deberta(), dropout, 1e-10);
        compare_gradients::<f32>(&deberta(), dropout, 1e-4);
    }
}

/// Three AdamW steps of two micro-batches each through the training loop
/// with a gradient clip well below the gradients' norm: the reference
/// clips on the host and updates tensor by tensor, the fused step does
/// both in one call (its word-embedding gradient row-sparse, its slots
/// given over both micro-batches).
#[test]
fn fused_optimizer_steps_with_the_clip_equal_the_reference() {
    for config in [bert(), deberta()] {
        let batches = [batch(9, vocab(&config)), batch(10, vocab(&config))];
        let run = |kernels: Kernels| {
            let be = backend::<f64>(kernels, MatmulPrecision::Fp32);
            let mut m = model(&be, &config, 4);
            let mut ctx = StepContext::new(
                &be,
                &mut *m,
                OptimizerConfig::default(),
                Some(&[1.0, 2.0, 0.5]),
                Some(0.05),
                false,
                8,
            );
            let mut norms = Vec::new();
            for _ in 0..3 {
                let loss =
                    train_step(&be, &mut *m, &mut ctx, &[&batches[0], &batches[1]], 1e-3).unwrap();
                assert!(loss.applied && loss.loss.is_finite());
                // The gradients of the last step, unclipped by the fused
                // path and clipped by the reference.
                norms.push(
                    m.params()
                        .grads
                        .iter()
                        .map(|g| be.sum_squares(g))
                        .sum::<f64>()
                        .sqrt(),
                );
            }
            let values: Vec<Vec<f64>> = m.params().values.iter().map(|v| be.download(v)).collect();
            (values, norms)
        };
        let (reference, norms_r) = run(Kernels::Reference);
        let (fused, norms_f) = run(Kernels::Fused);
        for (n_r, n_f) in norms_r.iter().zip(&norms_f) {
            // The reference's gradients were clipped to 0.05 in place.
            assert!((n_r - 0.05).abs() < 1e-9, "reference norm {n_r}");
            assert!(*n_f > 0.1, "the clip was active: fused norm {n_f}");
        }
        let worst = reference
            .iter()
            .zip(&fused)
            .map(|(r, f)| rel_err(f, r))
            .fold(0.0, f64::max);
        assert!(
            worst < 1e-10,
            "parameters after 3 steps differ by {worst:.2e}"
        );
    }
}

/// With the fused AdamW the word-embedding table's gradient is row-sparse:
/// a row per token of the step, and expanded it is the reference step's
/// dense gradient.
#[test]
fn the_fused_adamw_step_keeps_the_word_gradient_row_sparse() {
    for config in [bert(), deberta()] {
        let batch = batch(5, vocab(&config));
        let mode = Mode::Train { seed: 3, step: 1 };
        let word_grad = |kernels: Kernels| {
            let be = backend::<f64>(kernels, MatmulPrecision::Fp32);
            let mut m = model(&be, &config, 4);
            let _ctx = StepContext::new(
                &be,
                &mut *m,
                OptimizerConfig::default(),
                None,
                None,
                false,
                0,
            );
            m.train_batch(&be, &batch, None, 2.5, mode, false).unwrap();
            let p = m.params();
            let word = p.word_table.unwrap();
            let rows = be.len(&p.grads[word]) / p.info[word].shape[1];
            (p.sparse.is_some(), rows, p.dense_grad(&be, word))
        };
        let (sparse_r, rows_r, reference) = word_grad(Kernels::Reference);
        let (sparse_f, rows_f, fused) = word_grad(Kernels::Fused);
        assert!(!sparse_r && sparse_f);
        assert_eq!(rows_r, vocab(&config));
        assert_eq!(rows_f, batch.input_ids.len());
        let err = rel_err(&fused, &reference);
        assert!(err < 1e-10, "word-embedding gradients differ by {err:.2e}");
    }
}

/// A task a tiny BERT learns in a few dozen steps: is token 5 in the
/// sequence? Returns the mean loss of the last 10 steps and the accuracy
/// on held-out batches.
fn train_tiny_task(be: &CpuBackend<f32>) -> (f64, f64) {
    let mut config = BertConfig::tiny(32, 2, 4, 64, 12);
    config.hidden_dropout_prob = 0.1;
    config.attention_probs_dropout_prob = 0.1;
    let config: ModelConfig = config.into();
    let head = HeadConfig {
        num_labels: 2,
        hidden: vec![],
    };
    let mut m = config.build_random(be, &head, 1).unwrap();
    let mut ctx = StepContext::new(
        be,
        &mut *m,
        OptimizerConfig::default(),
        None,
        Some(1.0),
        false,
        1,
    );
    let make = |r: &mut Rand| {
        let lens: Vec<usize> = (0..16).map(|_| 4 + r.below(9)).collect();
        let mut b = random_batch(r, &lens, 12, 12, 2);
        for (i, len) in lens.into_iter().enumerate() {
            b.labels[i] = b.input_ids[i * 12..][..len].contains(&5) as usize;
        }
        b
    };
    let mut r = Rand::new(17, 1);
    let mut losses = Vec::new();
    for _ in 0..40 {
        let b = make(&mut r);
        losses.push(train_step(be, &mut *m, &mut ctx, &[&b], 3e-3).unwrap().loss);
    }
    let last = losses[losses.len() - 10..].iter().sum::<f64>() / 10.0;
    let (mut right, mut total) = (0, 0);
    for _ in 0..8 {
        let b = make(&mut r);
        let logits = m.logits(be, &b).unwrap();
        for (i, &y) in b.labels.iter().enumerate() {
            let predicted = (logits[2 * i + 1] > logits[2 * i]) as usize;
            right += (predicted == y) as usize;
            total += 1;
        }
    }
    (last, right as f64 / total as f64)
}

#[test]
fn sixteen_bit_activations_train_as_well_as_fp32() {
    let (loss32, acc32) = train_tiny_task(&backend(Kernels::Reference, MatmulPrecision::Fp32));
    println!("fp32 reference: last-10 loss {loss32:.6}, accuracy {acc32:.3}");
    assert!(acc32 > 0.9, "the task is learnt in fp32: {acc32}");
    for precision in [MatmulPrecision::Bf16, MatmulPrecision::Fp16] {
        let be = backend::<f32>(Kernels::Fused, precision);
        assert!(be.storage().activations.is_half());
        let (loss, acc) = train_tiny_task(&be);
        println!("fused {precision:?}: last-10 loss {loss:.6}, accuracy {acc:.3}");
        assert_ne!(
            loss, loss32,
            "{precision:?}: 16-bit storage changed nothing"
        );
        assert!(
            acc >= acc32 - 0.03,
            "{precision:?}: accuracy {acc} vs {acc32}"
        );
        assert!(
            (loss - loss32).abs() < 0.05 + 0.25 * loss32,
            "{precision:?}: loss {loss} vs {loss32}"
        );
    }
}
