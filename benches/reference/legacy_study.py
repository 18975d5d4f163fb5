"""The legacy setup's study, as its users run it today: plain Optuna +
PyTorch + transformers, the baseline of the GPU bundle's `legacy` step.

What it reproduces (the notes of the system memtune replaces): an Optuna
study whose trials train `*ForSequenceClassification` models, 2 trials at a
time in one process (`study.optimize(n_jobs=2)`, threads sharing the
device and its caching allocator, as their `PAR=2`); a trial that runs out
of memory is caught, its tensors dropped, `torch.cuda.empty_cache()`
called and the trial pruned (`TrialPruned`, user attributes `oom` and
`oom_config`), so the study goes on. `--memory-limit` caps the process with
`torch.cuda.set_per_process_memory_fraction`, as on a card of that size.

The search space is the packing simulation's (crates/cli/src/tune/simulate/
space.rs): the seven models (bert-base/large, roberta-base/large,
deberta-v3-base/large, xlm-roberta-base) at their published sizes with
random weights (torch_memory_peak.py's configs), batch size in {8, ..., 64}
as the micro-batch, max length 128-512 in steps of 32, and a log-uniform
learning rate. Seed policy as memtune's: the study's seed seeds the TPE
sampler and every trial's training (weights, dropout, batch order).

The data: `--examples` documents built from the embedded sentiment set
(crates/trainer/data/sentiment-labelled-sentences): each joins sentences of
one class until it has `--words` words, so every document is longer than
the largest max length in any tokenizer and every sequence is truncated to
exactly `max_length` tokens (the legacy data's long texts, and the memory
they take). `--write-data FILE` writes them as JSON lines for memtune's
study, `--data FILE` trains on such a file. The split is memtune's rule: per
class, round(n * 0.2) examples to validation. The tokenizer is a lowercased
word-level one built from the data (memtune's presets build theirs from the
data too), with the family's pad id.

A trial: build the model, train `--epochs` epochs (AdamW with decay groups
as torch_throughput.py, linear warmup 0.1 then decay, clipping at 1.0,
autocast bf16 on CUDA unless `--precision fp32`), accuracy on the
validation set after each epoch (reported to Optuna), the best is the
value. Useful tokens are the training tokens (attention mask ones) of
completed trials.

    python legacy_study.py [--device cuda|cpu] [--seconds 180] [--memory-limit 24GiB]
        [--n-jobs 2] [--examples 640] [--epochs 1] [--seed 1] [--json FILE]
    python legacy_study.py --write-data FILE [--examples 640]
    python legacy_study.py --print-space

Prints one JSON object (and writes it to `--json`): trials started,
completed, pruned by OOM, failed, OOM retries (always 0: the legacy setup
prunes), useful tokens and tokens per hour, mean trials in flight, the peak
memory PyTorch allocated and reserved, and one record per trial.
"""

import argparse
import gc
import json
import math
import os
import random
import re
import sys
import threading
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

# The packing simulation's space (crates/cli/src/tune/simulate/space.rs); the
# cli's tests check these against it.
MODELS = [
    "bert-base",
    "roberta-base",
    "bert-large",
    "roberta-large",
    "xlm-roberta-base",
    "deberta-v3-base",
    "deberta-v3-large",
]
BATCH_SIZES = [8, 12, 16, 24, 32, 48, 64]
LENGTHS = (128, 512, 32)
LEARNING_RATE = (1e-5, 2e-4)
VALIDATION_FRACTION = 0.2
SPLIT_SEED = 42
WARMUP_RATIO = 0.1
VOCAB = 8192


def parse_size(text):
    m = re.fullmatch(r"\s*([0-9.]+)\s*(B|KiB|MiB|GiB|KB|MB|GB)?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"bad size {text!r} (e.g. 24GiB)")
    unit = {None: 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30,
            "KB": 10**3, "MB": 10**6, "GB": 10**9}[m.group(2)]
    return int(float(m.group(1)) * unit)


# ---------------------------------------------------------------- data


def embedded_sentences(data_dir):
    """(text, class) of the embedded set, empty texts skipped as memtune does."""
    out = []
    for name in ("amazon.json", "imdb.json", "yelp.json"):
        for record in json.loads((Path(data_dir) / name).read_text()):
            text = str(record.get("text", "")).strip()
            if text:
                out.append((text, int(record["class"])))
    return out


def make_documents(sentences, n, words, seed):
    """`n` documents, classes alternating, each sentences of its class
    drawn with a seeded RNG until it has at least `words` words."""
    rng = random.Random(seed)
    by_class = {}
    for text, label in sentences:
        by_class.setdefault(label, []).append(text)
    classes = sorted(by_class)
    docs = []
    for i in range(n):
        label = classes[i % len(classes)]
        parts, count = [], 0
        while count < words:
            s = rng.choice(by_class[label])
            parts.append(s)
            count += len(s.split())
        docs.append({"text": " ".join(parts), "label": label})
    return docs


def read_documents(path):
    docs = []
    for line_no, line in enumerate(Path(path).read_text().splitlines(), 1):
        if line.strip():
            try:
                d = json.loads(line)
                docs.append({"text": str(d["text"]), "label": int(d["label"])})
            except (ValueError, KeyError) as e:
                sys.exit(f"{path}:{line_no}: not a {{text, label}} record: {e}")
    return docs


def split(docs, fraction, seed):
    """memtune's rule: per class, shuffled with `seed`, round(n * fraction)
    examples to validation; both sides keep the input order."""
    rng = random.Random(seed)
    in_validation = [False] * len(docs)
    for label in sorted({d["label"] for d in docs}):
        idx = [i for i, d in enumerate(docs) if d["label"] == label]
        rng.shuffle(idx)
        for i in idx[: round(len(idx) * fraction)]:
            in_validation[i] = True
    train = [d for d, v in zip(docs, in_validation) if not v]
    valid = [d for d, v in zip(docs, in_validation) if v]
    return train, valid


WORD = re.compile(r"\w+|[^\w\s]")


class WordTokenizer:
    """Lowercased words and punctuation, the `VOCAB` most frequent in the
    data, then `[UNK]`; the family's special ids (pad at `pad_id`)."""

    def __init__(self, texts, pad_id):
        counts = Counter(w for t in texts for w in WORD.findall(t.lower()))
        specials = ["<s>", "<pad>", "</s>", "<unk>"] if pad_id == 1 else ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
        self.pad, self.unk = (1, 3) if pad_id == 1 else (0, 1)
        self.cls, self.sep = (0, 2) if pad_id == 1 else (2, 3)
        words = [w for w, _ in counts.most_common(VOCAB - len(specials))]
        self.ids = {w: i + len(specials) for i, w in enumerate(words)}

    def encode(self, text):
        body = [self.ids.get(w, self.unk) for w in WORD.findall(text.lower())]
        return [self.cls] + body + [self.sep]


def truncate(ids, max_length):
    """A sequence cut to `max_length` tokens, its closing special kept."""
    return ids if len(ids) <= max_length else ids[: max_length - 1] + ids[-1:]


def batches(encoded, labels, batch_size, pad, order):
    """Micro-batches of `order`, each padded to its longest sequence."""
    import torch

    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        width = max(len(encoded[i]) for i in rows)
        ids = torch.full((len(rows), width), pad, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for r, i in enumerate(rows):
            ids[r, : len(encoded[i])] = torch.tensor(encoded[i])
            mask[r, : len(encoded[i])] = 1
        yield ids, mask, torch.tensor([labels[i] for i in rows])


# ---------------------------------------------------------------- models


def model_config(name):
    from torch_memory_peak import PRESETS
    from transformers import BertConfig, RobertaConfig

    # Two tiny shapes for the CPU test of this script only (not in the space).
    tiny = {
        "bert-tiny": lambda: BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                        num_attention_heads=2, intermediate_size=64, num_labels=2),
        "roberta-tiny": lambda: RobertaConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                              num_attention_heads=2, intermediate_size=64,
                                              max_position_embeddings=514, type_vocab_size=1,
                                              pad_token_id=1, num_labels=2),
    }
    make = PRESETS.get(name) or tiny.get(name)
    if make is None:
        sys.exit(f"unknown model {name!r} (known: {', '.join(list(PRESETS) + list(tiny))})")
    return make()


# ---------------------------------------------------------------- the study


def is_oom(e):
    import torch

    return isinstance(e, torch.cuda.OutOfMemoryError) or "out of memory" in str(e).lower()


class Study:
    def __init__(self, args, train, valid):
        import torch

        self.args = args
        self.train, self.valid = train, valid
        self.device = torch.device(args.device)
        self.lock = threading.Lock()
        self.records = []
        self.encodings = {}
        self.bf16 = args.device.startswith("cuda") and args.precision == "bf16"

    def encoded(self, pad_id):
        """Every document's ids at full length, per pad id (a trial cuts
        them to its max length)."""
        with self.lock:
            if pad_id not in self.encodings:
                tok = WordTokenizer([d["text"] for d in self.train], pad_id)
                self.encodings[pad_id] = (
                    tok,
                    [tok.encode(d["text"]) for d in self.train],
                    [tok.encode(d["text"]) for d in self.valid],
                )
            return self.encodings[pad_id]

    def objective(self, trial):
        import optuna
        import torch

        a = self.args
        name = trial.suggest_categorical("model", a.models)
        lr = trial.suggest_float("learning_rate", *LEARNING_RATE, log=True)
        batch_size = trial.suggest_categorical("batch_size", a.batch_sizes)
        low, high, step = a.lengths
        max_length = trial.suggest_int("max_length", low, high, step=step)
        record = {"number": trial.number, "model": name, "batch_size": batch_size,
                  "max_length": max_length, "start": time.monotonic() - a.t0}
        with self.lock:
            self.records.append(record)
        try:
            best, tokens = self.train_trial(trial, name, lr, batch_size, max_length)
            record.update(state="COMPLETE", tokens=tokens, value=best)
            return best
        except Exception as e:  # noqa: BLE001 - the legacy handler: OOM prunes, the rest fails
            if not is_oom(e):
                record.update(state="FAIL", error=f"{type(e).__name__}: {str(e)[:200]}")
                raise
            oom = e
        finally:
            record["end"] = time.monotonic() - a.t0
        # The legacy OOM handler, outside the `except` so the traceback (and
        # the trial's tensors its frames hold) is gone: collect, empty the
        # cache, record the configuration and prune.
        message = str(oom).splitlines()[0][:200]
        del oom
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        trial.set_user_attr("oom", True)
        trial.set_user_attr("oom_config", {"model": name, "batch_size": batch_size,
                                           "max_length": max_length, "error": message})
        record.update(state="PRUNED", oom=True)
        raise optuna.TrialPruned(f"OOM: {name} bs={batch_size} len={max_length}")

    def train_trial(self, trial, name, lr, batch_size, max_length):
        """Trains one trial; returns (best validation accuracy, training tokens)."""
        import torch
        from torch_throughput import adamw
        from transformers import AutoModelForSequenceClassification

        a = self.args
        config = model_config(name)
        config.num_labels = 2
        tok, full_train, full_valid = self.encoded(config.pad_token_id or 0)
        enc_train = [truncate(ids, max_length) for ids in full_train]
        enc_valid = [truncate(ids, max_length) for ids in full_valid]
        y_train = [d["label"] for d in self.train]
        y_valid = [d["label"] for d in self.valid]
        torch.manual_seed(a.seed)
        rng = random.Random(a.seed)
        # Built on the device: random initialisation there, not on the CPU.
        with self.device:
            model = AutoModelForSequenceClassification.from_config(config)
        optimizer = adamw(model, lr, fused=self.device.type == "cuda")
        steps = a.epochs * math.ceil(len(enc_train) / batch_size)
        warmup = int(steps * WARMUP_RATIO)
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer,
            lambda s: (s + 1) / max(1, warmup) if s < warmup else max(0.0, (steps - s) / max(1, steps - warmup)),
        )
        best, tokens = None, 0
        for epoch in range(a.epochs):
            model.train()
            order = list(range(len(enc_train)))
            rng.shuffle(order)
            for ids, mask, labels in batches(enc_train, y_train, batch_size, tok.pad, order):
                ids, mask, labels = ids.to(self.device), mask.to(self.device), labels.to(self.device)
                optimizer.zero_grad(set_to_none=True)
                with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
                    loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                schedule.step()
                tokens += int(mask.sum())
            model.eval()
            correct = 0
            with torch.no_grad():
                for ids, mask, labels in batches(enc_valid, y_valid, batch_size, tok.pad,
                                                 list(range(len(enc_valid)))):
                    with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
                        logits = model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device)).logits
                    correct += int((logits.argmax(-1).cpu() == labels).sum())
            accuracy = correct / max(1, len(enc_valid))
            best = accuracy if best is None else max(best, accuracy)
            trial.report(accuracy, epoch)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return best, tokens


def run(args):
    import optuna
    import torch

    docs = read_documents(args.data) if args.data else make_documents(
        embedded_sentences(args.data_dir), args.examples, args.words, args.seed)
    train, valid = split(docs, VALIDATION_FRACTION, SPLIT_SEED)
    if args.device.startswith("cuda"):
        device = torch.device(args.device)
        if device.index is None:
            # `set_per_process_memory_fraction` wants an index, not "cuda".
            device = torch.device("cuda", torch.cuda.current_device())
        total = torch.cuda.get_device_properties(device).total_memory
        if args.memory_limit:
            if args.memory_limit > total:
                sys.exit(f"--memory-limit {args.memory_limit} is above the device's {total} bytes")
            torch.cuda.set_per_process_memory_fraction(args.memory_limit / total, device)
        torch.cuda.reset_peak_memory_stats(device)
    else:
        torch.set_num_threads(args.threads)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = Study(args, train, valid)
    optuna_study = optuna.create_study(
        direction="maximize",
        sampler=optuna.samplers.TPESampler(seed=args.seed),
        pruner=optuna.pruners.NopPruner(),
    )
    args.t0 = time.monotonic()
    optuna_study.optimize(
        study.objective,
        n_trials=args.n_trials,
        timeout=args.seconds,
        n_jobs=args.n_jobs,
        catch=(Exception,),
        gc_after_trial=True,
    )
    wall = time.monotonic() - args.t0
    records = sorted(study.records, key=lambda r: r["number"])
    complete = [r for r in records if r.get("state") == "COMPLETE"]
    useful = sum(r["tokens"] for r in complete)
    busy = sum(r["end"] - r["start"] for r in records if "end" in r)
    figures = {
        "device": torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else "cpu",
        "memory_limit_bytes": args.memory_limit if args.device.startswith("cuda") else None,
        "parallel_trials": args.n_jobs,
        "seconds": wall,
        "train_examples": len(train),
        "validation_examples": len(valid),
        "epochs": args.epochs,
        "trials_started": len(records),
        "trials_completed": len(complete),
        "trials_pruned_by_oom": sum(1 for r in records if r.get("oom")),
        "trials_failed": sum(1 for r in records if r.get("state") == "FAIL"),
        "oom_retries": 0,
        "useful_tokens": useful,
        "useful_tokens_per_hour": useful / wall * 3600 if wall > 0 else 0.0,
        "mean_trials_in_flight": busy / wall if wall > 0 else 0.0,
        "torch_peak_allocated_bytes": torch.cuda.max_memory_allocated(args.device) if args.device.startswith("cuda") else None,
        "torch_peak_reserved_bytes": torch.cuda.max_memory_reserved(args.device) if args.device.startswith("cuda") else None,
        "torch": torch.__version__,
        "optuna": optuna.__version__,
        "trials": records,
    }
    return figures


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu")
    p.add_argument("--seconds", type=float, default=180.0, help="no new trial starts after this")
    p.add_argument("--n-trials", type=int, default=None, help="at most this many trials")
    p.add_argument("--memory-limit", type=parse_size, default=parse_size("24GiB"),
                   help="the process's cap on the device (set_per_process_memory_fraction)")
    p.add_argument("--n-jobs", type=int, default=2, help="trials in parallel (threads)")
    p.add_argument("--examples", type=int, default=640, help="documents, before the split")
    p.add_argument("--words", type=int, default=600, help="words per document, at least")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--precision", choices=["bf16", "fp32"], default="bf16", help="on CUDA")
    p.add_argument("--threads", type=int, default=1, help="CPU threads (--device cpu)")
    p.add_argument("--models", type=lambda s: s.split(","), default=MODELS)
    p.add_argument("--batch-sizes", type=lambda s: [int(x) for x in s.split(",")], default=BATCH_SIZES)
    p.add_argument("--lengths", type=lambda s: tuple(int(x) for x in s.split(":")), default=LENGTHS,
                   help="LOW:HIGH:STEP")
    p.add_argument("--data-dir", default=str(HERE.parent.parent / "crates/trainer/data/sentiment-labelled-sentences"))
    p.add_argument("--data", help="train on these documents (JSON lines) instead of making them")
    p.add_argument("--write-data", help="write the documents as JSON lines and stop")
    p.add_argument("--json", help="also write the figures here")
    p.add_argument("--print-space", action="store_true", help="print the search space as JSON and stop")
    args = p.parse_args()
    if args.print_space:
        print(json.dumps({"models": MODELS, "batch_sizes": BATCH_SIZES, "lengths": list(LENGTHS),
                          "learning_rate": list(LEARNING_RATE)}))
        return
    if args.write_data:
        docs = make_documents(embedded_sentences(args.data_dir), args.examples, args.words, args.seed)
        Path(args.write_data).write_text("".join(json.dumps(d) + "\n" for d in docs))
        print(f"{len(docs)} documents into {args.write_data}")
        return
    if len(args.lengths) != 3 or args.lengths[0] < 3 or args.lengths[1] < args.lengths[0]:
        sys.exit(f"--lengths: expected LOW:HIGH:STEP with 3 <= LOW <= HIGH, got {args.lengths}")
    for name in args.models:
        model_config(name)  # an unknown name stops here, not in a trial's thread
    figures = run(args)
    text = json.dumps(figures, indent=1)
    if args.json:
        Path(args.json).write_text(text + "\n")
    summary = {k: v for k, v in figures.items() if k != "trials"}
    print(json.dumps(summary))


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
