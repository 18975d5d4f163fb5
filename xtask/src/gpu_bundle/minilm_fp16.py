"""all-MiniLM-L6-v2 for the GPU bundle: fp16 weights and the vocabulary cut
down to the word pieces of the embedded data set, so the model fits the
device machine's carry limit (about 24 MB instead of 90).

The cut tokenizer gives the same pieces as the full one on the data:
WordPiece takes the longest piece of its vocabulary at each position, every
piece the full tokenizer produced is kept, and every longer piece the cut
vocabulary holds is in the full one too. The script checks this on every
sentence anyway. Ids are renumbered in the full vocabulary's order and the
word-embedding rows reordered with them.

    python minilm_fp16.py MODEL_DIR DATA_DIR OUT_DIR

MODEL_DIR is the unpacked all-MiniLM-L6-v2 (`cargo xtask fetch-model
minilm`), DATA_DIR holds the embedded data set's JSON files. Needs numpy and
tokenizers (benches/requirements.txt); safetensors files are read and
written here directly (8-byte header length, JSON header, raw data).
"""

import glob
import json
import os
import shutil
import sys

import numpy as np
from tokenizers import Tokenizer

DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "F64": np.float64}
NAMES = {np.dtype(v): k for k, v in DTYPES.items()}


def read_safetensors(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    metadata = header.pop("__metadata__", None)
    tensors = {}
    for name, t in header.items():
        if t["dtype"] not in DTYPES:
            sys.exit(f"{path}: tensor {name} has dtype {t['dtype']}, not one of {sorted(DTYPES)}")
        start, end = t["data_offsets"]
        tensors[name] = np.frombuffer(data[start:end], dtype=DTYPES[t["dtype"]]).reshape(t["shape"])
    return tensors, metadata


def write_safetensors(path, tensors, metadata):
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        blob = np.ascontiguousarray(tensors[name]).tobytes()
        header[name] = {
            "dtype": NAMES[tensors[name].dtype],
            "shape": list(tensors[name].shape),
            "data_offsets": [offset, offset + len(blob)],
        }
        blobs.append(blob)
        offset += len(blob)
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def sentences(data_dir):
    files = sorted(glob.glob(os.path.join(data_dir, "*.json")))
    if not files:
        sys.exit(f"no .json data files in {data_dir}")
    out = []
    for path in files:
        with open(path) as f:
            out += [r["text"] for r in json.load(f) if isinstance(r.get("text"), str)]
    return out


def remap_ids(node, new_id):
    """Every `"id"`/`"ids"` of special tokens in the tokenizer's JSON."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("id", "pad_id") and isinstance(value, int):
                node[key] = new_id[value]
            elif key == "ids" and isinstance(value, list):
                node[key] = [new_id[i] for i in value]
            else:
                remap_ids(value, new_id)
    elif isinstance(node, list):
        for value in node:
            remap_ids(value, new_id)


def main():
    model_dir, data_dir, out = sys.argv[1:4]
    os.makedirs(out, exist_ok=True)
    full = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    texts = sentences(data_dir)
    encoded = [full.encode(t).ids for t in texts]

    spec = json.load(open(os.path.join(model_dir, "tokenizer.json")))
    vocab = spec["model"]["vocab"]
    special = {t["id"] for t in spec.get("added_tokens", [])}
    kept = sorted(special | {i for ids in encoded for i in ids})
    new_id = {old: new for new, old in enumerate(kept)}
    by_old = {i: tok for tok, i in vocab.items()}
    spec["model"]["vocab"] = {by_old[old]: new for new, old in enumerate(kept)}
    remap_ids({k: v for k, v in spec.items() if k != "model"}, new_id)
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
        json.dump(spec, f, ensure_ascii=False)
    with open(os.path.join(out, "vocab.txt"), "w") as f:
        f.write("".join(by_old[old] + "\n" for old in kept))

    cut = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
    for text, ids in zip(texts, encoded):
        again = [kept[i] for i in cut.encode(text).ids]
        if again != ids:
            sys.exit(f"the cut tokenizer splits {text!r} differently: {again} vs {ids}")

    tensors, metadata = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    rows = [n for n, t in tensors.items() if n.endswith("word_embeddings.weight")]
    if len(rows) != 1 or tensors[rows[0]].shape[0] != len(vocab):
        sys.exit(f"expected one word-embedding table of {len(vocab)} rows, found {rows}")
    tensors[rows[0]] = tensors[rows[0]][kept]
    tensors = {n: t.astype(np.float16) if t.dtype == np.float32 else t for n, t in tensors.items()}
    write_safetensors(os.path.join(out, "model.safetensors"), tensors, metadata)

    config = json.load(open(os.path.join(model_dir, "config.json")))
    config["vocab_size"] = len(kept)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        if os.path.exists(os.path.join(model_dir, name)):
            shutil.copy(os.path.join(model_dir, name), os.path.join(out, name))
    size = sum(os.path.getsize(os.path.join(out, n)) for n in os.listdir(out))
    print(f"{out}: {len(kept)} of {len(vocab)} word pieces, fp16, {size / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
