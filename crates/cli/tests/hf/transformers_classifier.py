"""transformers' side of the `memtune train` / `memtune predict` round trips.

    python transformers_classifier.py logits MODEL_DIR TEXTS.jsonl
        Loads MODEL_DIR with AutoTokenizer and
        AutoModelForSequenceClassification.from_pretrained and prints, per
        line of TEXTS.jsonl ({"text": ..., optional "text_pair": ...}), one
        JSON list of logits (float32 model, eval mode, one text at a time).

    python transformers_classifier.py make OUT_DIR
        Saves a tiny random BertForSequenceClassification (3 labels) and its
        fast WordPiece tokenizer with save_pretrained, as a user of
        transformers would.
"""

import json
import sys
from pathlib import Path

import torch
from transformers import (
    AutoModelForSequenceClassification,
    AutoTokenizer,
    BertConfig,
    BertForSequenceClassification,
    BertTokenizerFast,
)

WORDS = (
    "the a film movie good bad great awful plot acting was is not very "
    "really story end ##s ##ing ##ly love hate boring fun"
).split()


def logits(model_dir, texts_path):
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir)
    model.eval()
    with torch.no_grad():
        for line in Path(texts_path).read_text().splitlines():
            if not line.strip():
                continue
            record = json.loads(line)
            args = [record["text"]]
            if record.get("text_pair"):
                args.append(record["text_pair"])
            encoded = tokenizer(*args, return_tensors="pt", truncation=True, max_length=128)
            out = model(**encoded).logits[0]
            print(json.dumps([float(v) for v in out]))


def make(out_dir):
    torch.manual_seed(0)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS
    tokenizer = BertTokenizerFast(vocab={t: i for i, t in enumerate(tokens)}, do_lower_case=True)
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=128,
        num_labels=3,
        # Wider than BERT's 0.02, so logits differ by more than rounding.
        initializer_range=0.3,
        id2label={0: "negative", 1: "neutral", 2: "positive"},
        label2id={"negative": 0, "neutral": 1, "positive": 2},
    )
    model = BertForSequenceClassification(config)
    # Non-trivial LayerNorm and bias values, so a loader that skipped them
    # would be caught.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "LayerNorm" in name:
                p.add_(0.1 * torch.randn_like(p))
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "logits":
        logits(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3 and sys.argv[1] == "make":
        make(sys.argv[2])
    else:
        sys.exit(__doc__)
