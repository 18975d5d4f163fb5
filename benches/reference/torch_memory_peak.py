"""PyTorch's peak GPU memory for the training steps of the memory-plan check
(crates/trainer/tests/cuda_memory_plan.rs), the peer of our plan.

Each CONFIG is `MODEL:BATCH:SEQ:RECOMPUTE[:PRECISION]` (e.g.
`bert-base:32:128:false` or `bert-base:8:512:false:bf16`) with MODEL one of
PRESETS: the shapes of the published Hugging Face
`config.json`s that the trainer's presets copy. For each, a randomly
initialised `*ForSequenceClassification` (2 labels, dropout on, fp32
weights; PRECISION `fp32`, the default, runs without autocast, `bf16` runs
forward and loss under `torch.autocast(dtype=torch.bfloat16)`, the mixed
precision recipe users run) takes two steps like the trainer's: zero grads (kept, not freed),
forward, cross-entropy, backward, clipping at 1.0, AdamW with decay groups
(torch_throughput.py's). The first step
creates AdamW's state; the figure is `torch.cuda.max_memory_allocated` over
the second, so weights, gradients, optimizer state and the step's
activations are all in it, as in the plan. RECOMPUTE turns on
`gradient_checkpointing_enable()`. The batch is the trainer's synthetic one
(torch_throughput.py's: token ids `i % vocab`, every token real, labels
`i % 2`).

    python torch_memory_peak.py [--device cuda|cpu|meta] CONFIG...

One JSON line per CONFIG: config, params (to check the shapes match ours),
peak_bytes (null on the CPU, which has no such counter), the last loss,
attn_implementation, torch and transformers versions. On the `meta` device
(shapes without storage) the model is only built and counted: no steps.
"""

import json
import sys

import torch
import transformers
from transformers import (
    BertConfig,
    DebertaV2Config,
    RobertaConfig,
    XLMRobertaConfig,
    AutoModelForSequenceClassification,
)

# The CPU throughput reference's optimiser (decay groups), batch and step,
# beside this file here and in the GPU bundle.
from torch_throughput import adamw, step, synthetic_batch


def bert_like(cls, vocab, hidden, layers, heads, ffn, **extra):
    return cls(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=ffn,
        hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1,
        num_labels=2,
        **extra,
    )


def roberta(cls, vocab, hidden, layers, heads, ffn):
    return bert_like(
        cls, vocab, hidden, layers, heads, ffn,
        max_position_embeddings=514, type_vocab_size=1, layer_norm_eps=1e-5, pad_token_id=1,
    )


def deberta_v3(hidden, layers, heads, ffn):
    return bert_like(
        DebertaV2Config, 128100, hidden, layers, heads, ffn,
        max_position_embeddings=512, type_vocab_size=0, layer_norm_eps=1e-7,
        relative_attention=True, position_buckets=256, norm_rel_ebd="layer_norm",
        share_att_key=True, pos_att_type=["p2c", "c2p"], max_relative_positions=-1,
        position_biased_input=False, pooler_hidden_size=hidden, pooler_dropout=0,
        pooler_hidden_act="gelu", hidden_act="gelu",
    )


PRESETS = {
    "bert-base": lambda: bert_like(BertConfig, 30522, 768, 12, 12, 3072),
    "bert-large": lambda: bert_like(BertConfig, 30522, 1024, 24, 16, 4096),
    "roberta-base": lambda: roberta(RobertaConfig, 50265, 768, 12, 12, 3072),
    "roberta-large": lambda: roberta(RobertaConfig, 50265, 1024, 24, 16, 4096),
    "xlm-roberta-base": lambda: roberta(XLMRobertaConfig, 250002, 768, 12, 12, 3072),
    "deberta-v3-base": lambda: deberta_v3(768, 12, 12, 3072),
    "deberta-v3-large": lambda: deberta_v3(1024, 24, 16, 4096),
}


def parse(spec):
    try:
        fields = spec.split(":")
        if len(fields) == 4:
            fields.append("fp32")
        model, batch, seq, recompute, precision = fields
        if model not in PRESETS or recompute not in ("true", "false") or precision not in ("fp32", "bf16"):
            raise ValueError
        return model, int(batch), int(seq), recompute == "true", precision == "bf16"
    except ValueError:
        sys.exit(
            f"bad config {spec!r}: expected MODEL:BATCH:SEQ:true|false[:fp32|bf16], "
            f"MODEL one of {sorted(PRESETS)}"
        )


def measure(spec, device):
    model_name, batch, seq, recompute, bf16 = parse(spec)
    config = PRESETS[model_name]()
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForSequenceClassification.from_config(config)
    model.train()
    if recompute:
        model.gradient_checkpointing_enable()
    params = sum(p.numel() for p in model.parameters())
    if device == "meta":
        return {"config": spec, "params": params, "peak_bytes": None, "loss": None}
    optimizer = adamw(model, 1e-5)
    inputs = synthetic_batch(batch, seq, config.vocab_size, config.num_labels, device)
    peak = None
    for i in range(2):
        if i == 1 and device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=bf16):
            loss = step(model, optimizer, inputs)
    if device == "cuda":
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
    out = {
        "config": spec,
        "params": params,
        "peak_bytes": peak,
        "loss": loss,
        "attn_implementation": model.config._attn_implementation,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
    del model, optimizer, inputs
    if device == "cuda":
        torch.cuda.empty_cache()
    return out


def main():
    args = sys.argv[1:]
    device = "cuda"
    if args[:1] == ["--device"]:
        device, args = args[1], args[2:]
    if device not in ("cuda", "cpu", "meta") or not args:
        sys.exit(__doc__)
    for spec in args:
        print(json.dumps(measure(spec, device)), flush=True)


if __name__ == "__main__":
    main()
