"""Independent reference for all-MiniLM-L6-v2 sentence embeddings (numpy only).

Reads model.safetensors and vocab.txt directly (no transformers, no
tokenizers), tokenises with BERT's uncased BasicTokenizer + WordPiece, runs
the BERT encoder in float64, mean-pools the last hidden state over the
attention mask and writes minilm_reference.json (token ids and embeddings)
for the Rust test tests/minilm.rs.

usage: python minilm_reference.py MODEL_DIR [OUT_JSON]
"""
import json
import math
import struct
import sys
import unicodedata

import numpy as np

SENTENCES = [
    "The new movie is awesome",
    "The new movie is so great",
    "A man is eating food.",
    "A man is riding a white horse on an enclosed ground.",
    "The cat sits outside",
    "I love pasta, but the service here was painfully slow!",
    "Worst purchase ever; it broke after two days.",
    "Unbelievable: the battery lasts for a week.",
]


def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__" or t["dtype"] != "F32":
            continue
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype="<f4").reshape(t["shape"]).astype(np.float64)
    return out


def basic_tokens(text):
    text = unicodedata.normalize("NFD", text.lower())
    text = "".join(c for c in text if unicodedata.category(c) != "Mn")
    out, cur = [], ""
    for c in text:
        cat = unicodedata.category(c)
        if c.isspace():
            if cur:
                out.append(cur)
            cur = ""
        elif cat.startswith("P") or (33 <= ord(c) <= 47) or (58 <= ord(c) <= 64) or (91 <= ord(c) <= 96) or (123 <= ord(c) <= 126):
            if cur:
                out.append(cur)
            out.append(c)
            cur = ""
        else:
            cur += c
    if cur:
        out.append(cur)
    return out


def wordpiece(word, vocab):
    pieces, start = [], 0
    while start < len(word):
        end, found = len(word), None
        while start < end:
            sub = word[start:end] if start == 0 else "##" + word[start:end]
            if sub in vocab:
                found = sub
                break
            end -= 1
        if found is None:
            return ["[UNK]"]
        pieces.append(found)
        start = end
    return pieces


def layernorm(x, g, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def gelu(x):
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def encode(ids, w, cfg):
    h, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    dh, eps = h // nh, cfg["layer_norm_eps"]
    s = len(ids)
    x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:s] + w["embeddings.token_type_embeddings.weight"][0]
    x = layernorm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
    lin = lambda x, p: x @ w[p + ".weight"].T + w[p + ".bias"]
    for i in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        q, k, v = (lin(x, p + "attention.self." + n).reshape(s, nh, dh).transpose(1, 0, 2) for n in ("query", "key", "value"))
        sc = q @ k.transpose(0, 2, 1) / math.sqrt(dh)
        sc = np.exp(sc - sc.max(-1, keepdims=True))
        pr = sc / sc.sum(-1, keepdims=True)
        ctx = (pr @ v).transpose(1, 0, 2).reshape(s, h)
        x = layernorm(lin(ctx, p + "attention.output.dense") + x, w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"], eps)
        f = lin(gelu(lin(x, p + "intermediate.dense")), p + "output.dense")
        x = layernorm(f + x, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"], eps)
    return x.mean(0)


def main():
    model_dir = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) > 2 else "minilm_reference.json"
    cfg = json.load(open(f"{model_dir}/config.json"))
    vocab = {t.rstrip("\n"): i for i, t in enumerate(open(f"{model_dir}/vocab.txt", encoding="utf-8"))}
    w = load_safetensors(f"{model_dir}/model.safetensors")
    rows = []
    for sent in SENTENCES:
        toks = ["[CLS]"] + [p for t in basic_tokens(sent) for p in wordpiece(t, vocab)] + ["[SEP]"]
        ids = [vocab[t] for t in toks]
        rows.append({"sentence": sent, "input_ids": ids, "embedding": encode(ids, w, cfg).tolist()})
    a, b = np.array(rows[0]["embedding"]), np.array(rows[1]["embedding"])
    cos = float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))
    json.dump({"model": "all-MiniLM-L6-v2", "cosine_0_1": cos, "rows": rows}, open(out, "w"), indent=1)
    print(f"wrote {out}; cosine('{SENTENCES[0]}', '{SENTENCES[1]}') = {cos:.4f}")


if __name__ == "__main__":
    main()
