"""Training throughput (sequences/s) of MiniLM-L6 in PyTorch CPU eager, the
reference for `cargo run --release -p trainer --example throughput`.

It measures the same step as the Rust example: a randomly initialised
MiniLM-L6-shaped `BertForSequenceClassification` (2 labels, HF's head:
pooler, dropout, linear), fp32, dropout 0.1 on, one batch of 32 sequences of
fixed length (every token real: attention mask all ones, token ids
`i % vocab`, labels `i % 2`), and a step = zero grads, forward,
cross-entropy, backward, global-norm clipping at 1.0, AdamW (lr 1e-5,
weight decay 0.01 except biases and LayerNorm weights). One warm-up step,
then `steps` timed steps, for sequence 64 and then 128.

    python benches/reference/torch_throughput.py [steps] [threads]

Prints the same table as the Rust example: wall time per step, sequences/s
by wall clock, CPU seconds per step (this process's user+system time, so the
figure can be read on a shared machine) and sequences per CPU-second x
threads.
"""

import sys
import time

import torch
from transformers import BertConfig, BertForSequenceClassification


def minilm_l6_config() -> BertConfig:
    # The shape of all-MiniLM-L6-v2 (crates/trainer: BertConfig::minilm_l6).
    return BertConfig(
        vocab_size=30522,
        hidden_size=384,
        num_hidden_layers=6,
        num_attention_heads=12,
        intermediate_size=1536,
        hidden_act="gelu",
        hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1,
        max_position_embeddings=512,
        type_vocab_size=2,
        layer_norm_eps=1e-12,
        initializer_range=0.02,
        num_labels=2,
    )


def adamw(model: torch.nn.Module, lr: float, fused: bool = False) -> torch.optim.AdamW:
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if name.endswith(".bias") or "LayerNorm" in name else decay).append(p)
    return torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": 0.01},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=lr,
        betas=(0.9, 0.999),
        eps=1e-8,
        fused=fused,
    )


def synthetic_batch(batch: int, seq: int, vocab: int, labels: int, device: str = "cpu"):
    # Same contents as trainer::memory::plan::synthetic_batch.
    ids = (torch.arange(batch * seq) % vocab).reshape(batch, seq)
    return {
        "input_ids": ids.to(device),
        "token_type_ids": torch.zeros(batch, seq, dtype=torch.long, device=device),
        "attention_mask": torch.ones(batch, seq, dtype=torch.long, device=device),
        "labels": (torch.arange(batch) % labels).to(device),
    }


def step(model, optimizer, batch) -> float:
    optimizer.zero_grad(set_to_none=False)
    loss = model(**batch).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return loss.item()


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else torch.get_num_threads()
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    config = minilm_l6_config()
    print(
        "PyTorch CPU eager: MiniLM-L6 (6 layers, hidden 384, 12 heads, ffn 1536, "
        "vocab 30522), fp32, AdamW, dropout 0.1"
    )
    print(
        f"torch {torch.__version__}, threads: {torch.get_num_threads()}, "
        f"interop threads: {torch.get_num_interop_threads()}"
    )
    print(
        f"| batch | seq | wall ms/step (mean of {steps}) | sequences/s (wall) "
        "| CPU s/step | sequences per CPU-second x threads |"
    )
    print("|---|---|---|---|---|---|")
    for seq in (64, 128):
        model = BertForSequenceClassification(config)
        model.train()
        optimizer = adamw(model, 1e-5)
        batch = synthetic_batch(32, seq, config.vocab_size, config.num_labels)
        step(model, optimizer, batch)  # warm-up
        start, cpu0 = time.perf_counter(), time.process_time()
        for _ in range(steps):
            step(model, optimizer, batch)
        secs = (time.perf_counter() - start) / steps
        cpu = (time.process_time() - cpu0) / steps
        print(
            f"| 32 | {seq} | {secs * 1e3:.0f} | {32 / secs:.2f} | {cpu:.2f} "
            f"| {32 / cpu * threads:.2f} |",
            flush=True,
        )
    print(f"attention implementation: {model.config._attn_implementation}")


if __name__ == "__main__":
    main()
