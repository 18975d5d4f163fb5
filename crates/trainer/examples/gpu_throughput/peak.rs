//! Peak dense bf16 tensor FLOP/s by device name: the denominator of MFU.
//!
//! Figures are the vendors' dense (no 2:4 sparsity) bf16 numbers with fp32
//! accumulation. A name is matched exactly after dropping the words that
//! do not change the chip (`NVIDIA`, `GeForce`, `Tesla`, the memory size),
//! so a variant with other clocks or power (H100 NVL, H200 NVL, RTX 4090 D)
//! is unknown rather than given a neighbour's figure; `--peak-tflops` covers
//! any device not listed.

/// Significant words of a device name, lowercase, and its peak in TFLOP/s.
const PEAKS: &[(&[&str], f64)] = &[
    (&["h100", "hbm3"], 989.4),
    (&["h100", "sxm5"], 989.4),
    (&["h100", "pcie"], 756.0),
    (&["h200"], 989.4),
    (&["a100"], 312.0),
    (&["a100", "sxm4"], 312.0),
    (&["a100", "pcie"], 312.0),
    (&["l4"], 121.0),
    (&["rtx", "4090"], 165.2),
];

/// The device's significant words: lowercase, split at anything that is
/// not a letter or digit, without vendor and memory-size words.
fn significant_words(name: &str) -> Vec<String> {
    name.to_lowercase()
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .filter(|w| !matches!(*w, "nvidia" | "geforce" | "tesla"))
        .filter(|w| !is_memory_size(w))
        .map(str::to_string)
        .collect()
}

/// `80gb`, `40gb`, ...
fn is_memory_size(word: &str) -> bool {
    word.strip_suffix("gb")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Peak dense bf16 FLOP/s of the device called `name` (as the CUDA driver
/// reports it), or `None` when it is not in the table.
pub fn dense_bf16_flops(name: &str) -> Option<f64> {
    let words = significant_words(name);
    PEAKS
        .iter()
        .find(|(key, _)| words.iter().map(String::as_str).eq(key.iter().copied()))
        .map(|(_, tflops)| tflops * 1e12)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_names_of_listed_devices_are_found() {
        for (name, tflops) in [
            ("NVIDIA H100 80GB HBM3", 989.4),
            ("NVIDIA H100 PCIe", 756.0),
            ("NVIDIA H200", 989.4),
            ("NVIDIA A100-SXM4-80GB", 312.0),
            ("NVIDIA A100-PCIE-40GB", 312.0),
            ("NVIDIA A100 80GB PCIe", 312.0),
            ("NVIDIA L4", 121.0),
            ("NVIDIA GeForce RTX 4090", 165.2),
        ] {
            assert_eq!(dense_bf16_flops(name), Some(tflops * 1e12), "{name}");
        }
    }

    #[test]
    fn variants_and_unknown_devices_have_no_figure() {
        for name in [
            "NVIDIA H100 NVL",
            "NVIDIA H200 NVL",
            "NVIDIA GH200 480GB",
            "NVIDIA GeForce RTX 4090 D",
            "NVIDIA L40S",
            "NVIDIA A10",
            "cpu",
            "",
        ] {
            assert_eq!(dense_bf16_flops(name), None, "{name}");
        }
    }
}
