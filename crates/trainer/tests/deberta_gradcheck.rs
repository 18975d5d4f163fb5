//! The DeBERTa model's backward against central differences of its loss, in
//! f64, with dropout on every site (keyed, regenerated in backward) and every
//! architecture option the fixture does not use (token types, absolute
//! positions, unbucketed distances, no relative-embedding LayerNorm); and
//! the same gradients when each layer is recomputed in backward.

mod common;

use std::path::Path;

use common::{Rand, assert_close, time_seed};
use trainer::backend::cpu::CpuBackend;
use trainer::backend::{Backend, LossTargets};
use trainer::batch::Batch;
use trainer::model::Mode;
use trainer::model::deberta::{DebertaBatch, DebertaClassifier, DebertaConfig};

type Be = CpuBackend<f64>;

fn config(variant: usize) -> DebertaConfig {
    let json = [
        r#"{"model_type": "deberta-v2", "vocab_size": 30, "hidden_size": 12,
        "num_hidden_layers": 2, "num_attention_heads": 3, "intermediate_size": 16,
        "max_position_embeddings": 16, "type_vocab_size": 2, "relative_attention": true,
        "position_buckets": 4, "max_relative_positions": 8, "share_att_key": true,
        "pos_att_type": ["p2c", "c2p"], "norm_rel_ebd": "layer_norm",
        "position_biased_input": true, "hidden_dropout_prob": 0.2,
        "attention_probs_dropout_prob": 0.2, "pooler_dropout": 0.2, "cls_dropout": 0.2}"#,
        r#"{"model_type": "deberta-v2", "vocab_size": 30, "hidden_size": 12,
        "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 16,
        "type_vocab_size": 0, "relative_attention": true, "max_relative_positions": 4,
        "share_att_key": true, "pos_att_type": "c2p", "norm_rel_ebd": "none",
        "position_biased_input": false, "hidden_dropout_prob": 0.1}"#,
    ][variant];
    DebertaConfig::from_json(json, Path::new("test.json")).unwrap()
}

#[test]
fn model_gradients_match_central_differences_with_dropout() {
    let seed = time_seed();
    for variant in 0..2 {
        let c = config(variant);
        let be = Be::new();
        let mut model = DebertaClassifier::new_random(&be, &c, 3, seed).unwrap();
        // Larger weights than HF's init, so attention is far from uniform.
        let mut r = Rand::new(seed, 10 + variant as u32);
        for i in 0..model.params.info.len() {
            let n = model.params.info[i].numel();
            let values: Vec<f64> = r.normals(n).iter().map(|v| 0.4 * v).collect();
            be.upload(&mut model.params.values[i], &values);
        }
        let (b, s) = (3, 7);
        let lens = [7, 4, 6];
        let batch = Batch {
            batch: b,
            seq: s,
            input_ids: (0..b * s).map(|_| 1 + r.below(29) as u32).collect(),
            token_type_ids: (0..b * s).map(|t| ((t % s) >= 3) as u32).collect(),
            attention_mask: (0..b * s).map(|t| ((t % s) < lens[t / s]) as u8).collect(),
            labels: vec![0, 2, 1],
        };
        let db = DebertaBatch::upload(&be, &c, 3, &batch).unwrap();
        let mode = Mode::Train { seed, step: 3 };
        model.alloc_grads(&be);
        let loss = model.forward_backward(&be, &db, None, 2.0, mode, false);
        // Recomputing each layer in backward (same dropout keys) gives the
        // same loss and gradients, bit for bit.
        let kept: Vec<Vec<f64>> = model.params.grads.iter().map(|g| be.download(g)).collect();
        model.zero_grads(&be);
        let again = model.forward_backward(&be, &db, None, 2.0, mode, true);
        assert_eq!(loss.to_bits(), again.to_bits(), "variant {variant}: loss");
        for (i, g) in model.params.grads.iter().enumerate() {
            let name = &model.params.info[i].name;
            assert_eq!(
                be.download(g),
                kept[i],
                "variant {variant}: recomputation changed {name}"
            );
        }
        for i in 0..model.params.info.len() {
            let analytic = be.download(&model.params.grads[i]);
            let original = be.download(&model.params.values[i]);
            // The largest entries set the check's scale; random ones alone
            // can all be rows no token uses, whose gradients are zero or
            // near the central difference's rounding noise (~1e-10 here).
            let mut order: Vec<usize> = (0..analytic.len()).collect();
            order.sort_by(|&a, &b| analytic[b].abs().total_cmp(&analytic[a].abs()));
            let mut picks: Vec<usize> = order[..order.len().min(3)].to_vec();
            picks.extend((0..original.len().min(3)).map(|_| r.below(original.len())));
            let loss_at = |model: &mut DebertaClassifier<Be>, j: usize, x: f64| {
                let mut v = original.clone();
                v[j] = x;
                be.upload(&mut model.params.values[i], &v);
                let tape = model.forward(&be, &db, mode, true);
                be.cross_entropy_forward(
                    tape.logits(),
                    &LossTargets::new(&db.ids.labels, None, 3, 2.0),
                )
            };
            let h = 1e-6;
            let numeric: Vec<f64> = picks
                .iter()
                .map(|&j| {
                    let plus = loss_at(&mut model, j, original[j] + h);
                    let minus = loss_at(&mut model, j, original[j] - h);
                    (plus - minus) / (2.0 * h)
                })
                .collect();
            be.upload(&mut model.params.values[i], &original);
            let picked: Vec<f64> = picks.iter().map(|&j| analytic[j]).collect();
            let what = format!("variant {variant}: {}", model.params.info[i].name);
            assert_close(&what, &picked, &numeric, 1e-5, seed);
        }
    }
}
