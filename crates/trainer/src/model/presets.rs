//! Architectures by name, of every family the trainer runs: the shared
//! BERT-shaped encoder's presets ([`BertConfig::PRESETS`]) and DeBERTa-v3's.
//! Simulated trials and memory plans without a model directory name their
//! model this way, and get the same [`ModelConfig`] dispatch as a run on a
//! directory (`config.json`'s `model_type`).

use super::ModelConfig;
use super::deberta::DebertaConfig;
use crate::config::BertConfig;

/// DeBERTa-v3 presets, each from its published Hugging Face `config.json`.
const DEBERTA_PRESETS: [&str; 2] = ["deberta-v3-base", "deberta-v3-large"];

impl ModelConfig {
    /// Names accepted by [`Self::preset`]: every BERT-shaped preset, then
    /// DeBERTa-v3's.
    pub const PRESETS: [&'static str; BertConfig::PRESETS.len() + DEBERTA_PRESETS.len()] = {
        let mut all = [""; BertConfig::PRESETS.len() + DEBERTA_PRESETS.len()];
        let mut i = 0;
        while i < BertConfig::PRESETS.len() {
            all[i] = BertConfig::PRESETS[i];
            i += 1;
        }
        let mut j = 0;
        while j < DEBERTA_PRESETS.len() {
            all[i + j] = DEBERTA_PRESETS[j];
            j += 1;
        }
        all
    };

    /// The architecture called `name` (one of [`Self::PRESETS`]).
    pub fn preset(name: &str) -> Option<Self> {
        match name {
            "deberta-v3-base" => Some(DebertaConfig::deberta_v3_base().into()),
            "deberta-v3-large" => Some(DebertaConfig::deberta_v3_large().into()),
            _ => BertConfig::preset(name).map(Self::from),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_name_resolves_to_its_family() {
        for name in ModelConfig::PRESETS {
            let config = ModelConfig::preset(name).unwrap_or_else(|| panic!("{name}"));
            let deberta = name.starts_with("deberta");
            assert_eq!(config.model_type() == "deberta-v2", deberta, "{name}");
        }
        assert_eq!(
            ModelConfig::PRESETS.len(),
            BertConfig::PRESETS.len() + DEBERTA_PRESETS.len()
        );
        assert!(ModelConfig::preset("gpt-2").is_none());
        assert!(ModelConfig::preset("").is_none());
    }
}
