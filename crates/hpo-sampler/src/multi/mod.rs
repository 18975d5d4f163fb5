//! Several objectives: Pareto dominance, non-dominated sorting, the Pareto
//! front of a study (Optuna's `study.best_trials`), exact hypervolume and
//! greedy hypervolume subset selection, with Optuna 5.0's semantics.
//!
//! Everything here works on *loss vectors*: each objective's value signed so
//! that smaller is better ([`loss_values`] flips maximised objectives), as
//! Optuna's `_normalize_value` does.
//!
//! ```
//! use hpo_sampler::multi::{hypervolume, non_domination_ranks, pareto_front_indices};
//!
//! // Two objectives, both minimised.
//! let points = [vec![1.0, 4.0], vec![2.0, 2.0], vec![3.0, 3.0], vec![4.0, 1.0]];
//! assert_eq!(pareto_front_indices(&points), vec![0, 1, 3]);
//! assert_eq!(non_domination_ranks(&points, None), vec![0, 0, 1, 0]);
//! // The area dominated by the points, bounded by (5, 5): 4 + 6 + 1 + ... = 11.
//! assert_eq!(hypervolume(&points, &[5.0, 5.0]), 11.0);
//! ```

mod hypervolume;
mod pareto;

pub use hypervolume::{hypervolume, reference_point, select_by_hypervolume};
pub use pareto::{
    constrained_dominates, constrained_ranks, dominates, loss_values, non_domination_ranks,
    pareto_front, pareto_front_indices,
};
pub(crate) use pareto::{losses, ranks_of_pairs};
