//! The whole classifier of each family (2 layers, hidden 32, 4 heads, a
//! hidden head layer, class weights, dropout on, padding in the batch):
//! analytic gradients of every parameter tensor against central finite
//! differences in f64, and the same gradients bit for bit when the layers
//! are recomputed in backward.

mod common;

use common::{Rand, assert_close, random_batch, time_seed};
use trainer::backend::Backend;
use trainer::backend::cpu::CpuBackend;
use trainer::config::BertConfig;
use trainer::memory::BufKind;
use trainer::model::{BertClassifier, DeviceBatch, HeadConfig, Mode};

const H: f64 = 1e-5;
const TOL: f64 = 1e-6;
/// Entries checked per tensor: the largest analytic gradients plus random ones.
const LARGEST: usize = 3;
const RANDOM: usize = 5;

fn check(model_type: &str) {
    let seed = time_seed();
    let be = CpuBackend::<f64>::new();
    let mut r = Rand::new(seed, 100);
    let mut config = BertConfig::tiny(32, 2, 4, 64, 40);
    config.model_type = model_type.into();
    match model_type {
        "roberta" => config.pad_token_id = 1,
        // Embeddings narrower than the encoder: `embeddings_project`.
        "electra" => config.embedding_size = Some(16),
        _ => {}
    }
    let head = HeadConfig {
        num_labels: 3,
        hidden: vec![16],
    };
    let mut model = BertClassifier::new_random(&be, &config, &head, seed).unwrap();
    // Larger-than-init weights make every path's gradient clearly non-zero.
    for i in 0..model.params.info.len() {
        if model.params.info[i].decay {
            model.params.values[i]
                .data
                .iter_mut()
                .for_each(|v| *v *= 10.0);
        }
    }
    let batch = random_batch(&mut r, &[7, 4, 2], 7, config.vocab_size, 3);
    let device = DeviceBatch::upload(&be, &config, 3, &batch).unwrap();
    let mut weights = be.alloc("w", BufKind::Input, 3);
    be.upload(&mut weights, &[0.7, 1.9, 1.2]);
    let denom = 2.5;
    let mode = Mode::Train { seed, step: 5 };
    model.alloc_grads(&be);
    let loss = model.forward_backward(&be, &device, Some(&weights), denom, mode, false);
    let analytic: Vec<Vec<f64>> = model.params.grads.iter().map(|g| g.data.clone()).collect();
    assert!((loss - model.loss(&be, &device, Some(&weights), denom, mode)).abs() < 1e-12);

    // Recomputing the layers in backward gives the same gradients, bit
    // for bit.
    model.zero_grads(&be);
    model.forward_backward(&be, &device, Some(&weights), denom, mode, true);
    for (i, g) in model.params.grads.iter().enumerate() {
        assert_eq!(
            g.data, analytic[i],
            "recomputation changed {}",
            model.params.info[i].name
        );
    }

    for (i, grad) in analytic.iter().enumerate() {
        let n = grad.len();
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|&a, &b| grad[b].abs().total_cmp(&grad[a].abs()));
        let mut picks: Vec<usize> = order[..LARGEST.min(n)].to_vec();
        picks.extend((0..RANDOM).map(|_| r.below(n)));
        let (mut a, mut num) = (Vec::new(), Vec::new());
        for &j in &picks {
            let orig = model.params.values[i].data[j];
            model.params.values[i].data[j] = orig + H;
            let plus = model.loss(&be, &device, Some(&weights), denom, mode);
            model.params.values[i].data[j] = orig - H;
            let minus = model.loss(&be, &device, Some(&weights), denom, mode);
            model.params.values[i].data[j] = orig;
            a.push(grad[j]);
            num.push((plus - minus) / (2.0 * H));
        }
        assert_close(&model.params.info[i].name, &a, &num, TOL, seed);
    }
}

#[test]
fn classifier_gradients_match_finite_differences() {
    check("bert");
}

#[test]
fn roberta_positions_gradients_match_finite_differences() {
    check("roberta");
}

#[test]
fn distilbert_gradients_match_finite_differences() {
    check("distilbert");
}

#[test]
fn electra_projection_and_gelu_head_gradients_match_finite_differences() {
    check("electra");
}
