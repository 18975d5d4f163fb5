"""Reference fine-tuning of all-MiniLM-L6-v2 with PyTorch + HF transformers,
with the hyperparameters of `cargo run --release -p trainer --example finetune`
(crates/trainer/examples/finetune.rs), to compare validation accuracy.

    python benches/reference/hf_finetune.py [--split FILE] MODEL_DIR [EPOCHS] [LR] [BATCH] [MAX_LENGTH] [SEED]

Same as the Rust run: the 3,000 Sentiment Labelled Sentences of
crates/trainer/data/sentiment-labelled-sentences (amazon, imdb, yelp; records
with empty text or null class skipped), a stratified 80/20 split keeping
texts that are equal after collapsing whitespace and folding case on one
side; `BertForSequenceClassification` (pooler, dropout 0.1, linear) from the
pretrained weights; 3 epochs of batch 32, max length 64 (truncation, dynamic
padding to each batch's longest), AdamW lr 5e-5 (betas 0.9/0.999, eps 1e-8,
weight decay 0.01 except biases and LayerNorm weights), linear warmup over
ceil(10%) of the steps then linear decay to 0, clipping to global norm 1.0,
training order shuffled each epoch, 2 threads.

The split: with `--split FILE`, exactly the Rust one. FILE has one line per
loaded example, in load order: `index label characters side` (side is
`train` or `validation`), as printed by `cargo run --release -p trainer --example split_dump` from `trainer::data::stratified_split`
(seed 42, fraction 0.2) over the embedded set; labels and text lengths are
checked against the JSON files. Without it, the same procedure with Python's
`random.Random(SPLIT_SEED)`: the sizes match (2,400/600, 300 per class in
validation, the same 19 duplicate groups) but not which sentences are on
each side (the Rust split shuffles with rand_chacha's ChaCha12Rng).
Never the same: batch membership and order, dropout masks and the
classifier's initial weights (their RNGs differ).
"""

import json
import math
import os
import random
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from transformers import (  # noqa: E402
    AutoTokenizer,
    BertForSequenceClassification,
    get_linear_schedule_with_warmup,
)

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "crates/trainer/data/sentiment-labelled-sentences"
FILES = ("amazon.json", "imdb.json", "yelp.json")
SPLIT_SEED = 42
VALIDATION_FRACTION = 0.2
THREADS = 2


def load_examples():
    """(text, label) of every usable record, in file order, and the skip count."""
    examples, skipped = [], 0
    for name in FILES:
        for record in json.loads((DATA / name).read_text()):
            text, label = record.get("text"), record.get("class")
            if not isinstance(text, str) or not text.strip() or label not in (0, 1):
                skipped += 1
                continue
            examples.append((text, label))
    return examples, skipped


def dedup_key(text: str) -> str:
    return " ".join(text.split()).lower()


def stratified_split(examples, fraction: float, seed: int):
    """Groups of equal texts go wholly to one side; per class, groups are
    shuffled and sent to validation until it has round(n * fraction)
    records (the procedure of crates/trainer/src/data/split.rs)."""
    groups, group_of = [], {}
    for i, (text, _) in enumerate(examples):
        key = dedup_key(text)
        if key not in group_of:
            group_of[key] = len(groups)
            groups.append([])
        groups[group_of[key]].append(i)
    rng = random.Random(seed)
    in_validation = [False] * len(examples)
    for label in (0, 1):
        class_groups = [g for g in groups if examples[g[0]][1] == label]
        rng.shuffle(class_groups)
        target = round(sum(len(g) for g in class_groups) * fraction)
        taken = 0
        for g in class_groups:
            if taken >= target:
                break
            taken += len(g)
            for i in g:
                in_validation[i] = True
    train = [e for e, v in zip(examples, in_validation) if not v]
    valid = [e for e, v in zip(examples, in_validation) if v]
    duplicates = sum(1 for g in groups if len(g) > 1)
    return train, valid, duplicates


def split_from_file(examples, path: Path):
    """The two sides as listed in `path` (see the module doc)."""
    rows = [line.split() for line in path.read_text().splitlines() if line.strip()]
    if len(rows) != len(examples):
        raise SystemExit(f"{path}: {len(rows)} lines for {len(examples)} examples")
    train, valid = [], []
    for n, (row, (text, label)) in enumerate(zip(rows, examples), start=1):
        if len(row) != 4 or row[0] != str(n - 1) or row[3] not in ("train", "validation"):
            raise SystemExit(f"{path}:{n}: expected 'index label characters side', got {row}")
        if int(row[1]) != label or int(row[2]) != len(text):
            raise SystemExit(f"{path}:{n}: label/length {row[1]}/{row[2]} != {label}/{len(text)}")
        (valid if row[3] == "validation" else train).append((text, label))
    return train, valid


def load_model(model_dir: Path):
    """The pretrained encoder and pooler; only the classifier is new."""
    model, info = BertForSequenceClassification.from_pretrained(
        model_dir, num_labels=2, output_loading_info=True
    )
    missing = set(info["missing_keys"])
    if missing - {"classifier.weight", "classifier.bias"}:
        raise SystemExit(f"pretrained weights not loaded: missing {sorted(missing)}")
    # Direct check that the prefix-less file names were mapped onto the model.
    stored = load_file(str(model_dir / "model.safetensors"))
    state = model.state_dict()
    loaded = [
        name
        for name, tensor in stored.items()
        if "bert." + name in state and torch.equal(state["bert." + name], tensor)
    ]
    encoder = [n for n in state if n.startswith("bert.")]
    if len(loaded) != len(encoder):
        raise SystemExit(
            f"only {len(loaded)} of {len(encoder)} encoder tensors equal the file's"
        )
    print(
        f"loaded {len(loaded)} of {len(encoder)} encoder/pooler tensors from the file; "
        f"new: {sorted(missing)}; unused in file: {sorted(info['unexpected_keys'])}"
    )
    return model


def batches(tokenizer, examples, indices, batch_size, max_length):
    for start in range(0, len(indices), batch_size):
        chunk = [examples[i] for i in indices[start : start + batch_size]]
        enc = tokenizer(
            [t for t, _ in chunk],
            truncation=True,
            max_length=max_length,
            padding="longest",
            return_tensors="pt",
        )
        enc["labels"] = torch.tensor([y for _, y in chunk])
        yield enc


def evaluate(model, tokenizer, examples, batch_size, max_length):
    model.eval()
    loss_sum, preds, labels = 0.0, [], []
    with torch.no_grad():
        for batch in batches(tokenizer, examples, list(range(len(examples))), batch_size, max_length):
            logits = model(**{k: v for k, v in batch.items() if k != "labels"}).logits
            loss_sum += torch.nn.functional.cross_entropy(
                logits, batch["labels"], reduction="sum"
            ).item()
            preds += logits.argmax(-1).tolist()
            labels += batch["labels"].tolist()
    model.train()
    n = len(labels)
    accuracy = sum(p == y for p, y in zip(preds, labels)) / n
    f1s = []
    for c in (0, 1):
        tp = sum(p == c and y == c for p, y in zip(preds, labels))
        fp = sum(p == c and y != c for p, y in zip(preds, labels))
        fn = sum(p != c and y == c for p, y in zip(preds, labels))
        f1s.append(2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0)
    return loss_sum / n, accuracy, sum(f1s) / len(f1s)


def main() -> None:
    args = sys.argv[1:]
    split_file = None
    if "--split" in args:
        at = args.index("--split")
        split_file = Path(args[at + 1])
        del args[at : at + 2]
    if not args:
        raise SystemExit(__doc__)
    model_dir = Path(args[0])
    epochs = int(args[1]) if len(args) > 1 else 3
    lr = float(args[2]) if len(args) > 2 else 5e-5
    batch_size = int(args[3]) if len(args) > 3 else 32
    max_length = int(args[4]) if len(args) > 4 else 64
    seed = int(args[5]) if len(args) > 5 else 0
    torch.set_num_threads(THREADS)
    torch.manual_seed(seed)

    examples, skipped = load_examples()
    train, valid, duplicates = stratified_split(examples, VALIDATION_FRACTION, SPLIT_SEED)
    if split_file is not None:
        train, valid = split_from_file(examples, split_file)
    print(
        f"split: {split_file or f'Python, seed {SPLIT_SEED}'}; "
        f"{len(examples)} examples ({skipped} records skipped, {duplicates} duplicate groups): "
        f"{len(train)} train, {len(valid)} validation "
        f"({sum(y for _, y in valid)} positive)"
    )
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = load_model(model_dir)
    model.train()
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, "
        f"attention {model.config._attn_implementation}, "
        f"dropout {model.config.hidden_dropout_prob}/{model.config.attention_probs_dropout_prob}"
    )

    no_decay = [p for n, p in model.named_parameters() if n.endswith(".bias") or "LayerNorm" in n]
    decay = [p for n, p in model.named_parameters() if not (n.endswith(".bias") or "LayerNorm" in n)]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
        lr=lr,
        betas=(0.9, 0.999),
        eps=1e-8,
    )
    steps_per_epoch = math.ceil(len(train) / batch_size)
    total = steps_per_epoch * epochs
    warmup = math.ceil(0.1 * total)
    scheduler = get_linear_schedule_with_warmup(optimizer, warmup, total)
    print(f"{total} steps, {warmup} warmup")

    order_rng = torch.Generator().manual_seed(seed)
    start = time.perf_counter()
    best = (-1.0, -1)
    for epoch in range(epochs):
        order = torch.randperm(len(train), generator=order_rng).tolist()
        loss_sum, steps = 0.0, 0
        for batch in batches(tokenizer, train, order, batch_size, max_length):
            optimizer.zero_grad()
            loss = model(**batch).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            loss_sum += loss.item()
            steps += 1
        valid_loss, accuracy, f1 = evaluate(model, tokenizer, valid, batch_size, max_length)
        print(
            f"epoch {epoch} train_loss {loss_sum / steps:.4f} valid_loss {valid_loss:.4f} "
            f"accuracy {accuracy:.4f} f1_macro {f1:.4f} ({time.perf_counter() - start:.0f} s)",
            flush=True,
        )
        best = max(best, (accuracy, epoch))
    print(f"best epoch {best[1]}: validation accuracy {best[0]:.4f} on {len(valid)} examples")


if __name__ == "__main__":
    main()
