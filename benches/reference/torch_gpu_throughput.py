"""Training throughput of Hugging Face's `BertForSequenceClassification`
(`DebertaV2ForSequenceClassification` for a `deberta-v2` config) in eager
PyTorch, the reference for the trainer's `gpu_throughput` example
(`cargo run --release -p trainer --features cuda --example gpu_throughput --
--python PY`), which runs this script and reads its output.

The step is the one the Rust example times (and `torch_throughput.py`'s):
a randomly initialised model (2 labels, HF's head), dropout on, one fixed
batch (every token real: attention mask all ones, token ids `i % vocab`,
labels `i % 2`, as `trainer::memory::plan::synthetic_batch`), and a step =
zero grads, forward, cross-entropy, backward, global-norm clipping at 1.0,
AdamW (lr 1e-5, weight decay 0.01 except biases and LayerNorm weights).
The forward pass and loss run under `torch.autocast(dtype=torch.bfloat16)`
(the usual mixed-precision recipe: fp32 weights, bf16 matrix products);
a model runs through `torch.compile` (default mode) with `--compile`
(every model) or when its spec has `"compile": true`; the compilation falls
in the warm-up steps. On CUDA, AdamW is the fused kernel (`fused=True`).
Attention is HF's default implementation for the installed transformers
(`sdpa`), reported as `attn_implementation`.

    python torch_gpu_throughput.py [--steps N] [--warmup N] [--repeats N] [--device cuda|cpu] [--compile] MODEL...

Each MODEL is one JSON object: `{"name": ..., "batch": B, "seq": S,
"config": {config.json fields}, "compile": bool (optional)}` (the Rust
example passes its models' `BertConfig::hf_config_json`, every model eager
and then the ones it compiles). For each, it runs `warmup` untimed steps,
then `repeats` timed runs of `steps` steps each (the loss is read after
every step, which waits for the device, as the Rust example does), and
prints one JSON line: model, batch, seq, ms_per_step (the median run's
mean step time), ms_per_step_runs (every run's, in order),
ms_per_step_min and ms_per_step_max, seqs_per_s (at the median), loss
(the last step's; null when not finite), compiled, torch and
transformers versions, attn_implementation, device name and, on CUDA,
`torch.cuda.max_memory_allocated` during the model's timed runs.
"""

import argparse
import json
import math
import platform
import statistics
import time

import torch
import transformers
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    DebertaV2Config,
    DebertaV2ForSequenceClassification,
)

# The CPU reference's optimiser (decay groups) and batch; its folder is on
# the path, beside this script here and in the GPU bundle.
from torch_throughput import adamw, synthetic_batch


def step(model, optimizer, batch, device: str) -> float:
    optimizer.zero_grad(set_to_none=False)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        loss = model(**batch).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return loss.item()


def device_name(device: str) -> str:
    if device == "cuda":
        return torch.cuda.get_device_name(0)
    return platform.processor() or platform.machine() or "cpu"


def measure(spec: dict, steps: int, warmup: int, repeats: int, device: str, compile: bool) -> dict:
    fields = dict(spec["config"])
    # The class fixes the architecture; a `model_type` keyword would only
    # shadow its class attribute. Every BERT-like family trains as BERT.
    deberta = fields.pop("model_type", None) == "deberta-v2"
    config_class, model_class = (
        (DebertaV2Config, DebertaV2ForSequenceClassification)
        if deberta
        else (BertConfig, BertForSequenceClassification)
    )
    config = config_class(num_labels=2, **fields)
    torch.manual_seed(0)
    model = model_class(config).to(device)
    model.train()
    optimizer = adamw(model, 1e-5, fused=device == "cuda")
    if compile:
        model = torch.compile(model)
    batch = synthetic_batch(spec["batch"], spec["seq"], config.vocab_size, 2, device)
    for _ in range(warmup):
        step(model, optimizer, batch, device)
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    runs = []
    loss = float("nan")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(steps):
            loss = step(model, optimizer, batch, device)
        if device == "cuda":
            torch.cuda.synchronize()
        runs.append((time.perf_counter() - start) / steps)
    secs = statistics.median(runs)
    return {
        "model": spec["name"],
        "batch": spec["batch"],
        "seq": spec["seq"],
        "ms_per_step": secs * 1e3,
        "ms_per_step_runs": [r * 1e3 for r in runs],
        "ms_per_step_min": min(runs) * 1e3,
        "ms_per_step_max": max(runs) * 1e3,
        "seqs_per_s": spec["batch"] / secs,
        # JSON has no NaN: a loss that is not finite is written as null.
        "loss": loss if math.isfinite(loss) else None,
        "attn_implementation": model.config._attn_implementation,
        "compiled": compile,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "device": device_name(device),
        "max_memory_allocated": (
            torch.cuda.max_memory_allocated() if device == "cuda" else None
        ),
    }


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=1, help="timed runs per model; the median is reported")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--compile", action="store_true", help="run every model through torch.compile")
    parser.add_argument("models", nargs="+", type=json.loads, help="JSON model specs")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if args.warmup < 0:
        parser.error("--warmup must not be negative")
    for spec in args.models:
        if not isinstance(spec, dict) or not isinstance(spec.get("compile", False), bool):
            parser.error(f"not a model spec (an object whose optional compile is true or false): {spec!r}")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device")
    return args


def main() -> None:
    args = parse_args()
    for spec in args.models:
        compile = args.compile or spec.get("compile", False)
        result = measure(spec, args.steps, args.warmup, args.repeats, args.device, compile)
        print(json.dumps(result, allow_nan=False), flush=True)
        if args.device == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
