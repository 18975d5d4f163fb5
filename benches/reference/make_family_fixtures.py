"""Parity fixtures for every model family, made with transformers.

For each row of FAMILIES: trains a small tokenizer of the family's kind with
the `tokenizers` library (WordPiece, byte-level BPE or SentencePiece
Unigram), wraps it in the family's transformers tokenizer class, builds a
tiny random `*ForSequenceClassification` model, runs one forward and one
backward (eval mode, so no dropout) on fixed texts with pairs, and writes
under crates/trainer/tests/fixtures/families/<family>/:

  config.json, model.safetensors, tokenizer.json   (save_pretrained's files)
  reference.safetensors   input_ids, attention_mask, token_type_ids (when the
                          tokenizer returns them), labels, logits, loss [1],
                          grad.<HF parameter name> for every parameter
  tokenizer_cases.json    the tokenizer's ids for 200+ strings and pairs,
                          untruncated and truncated to 16 tokens
  meta.json               the command, the texts and the versions

The Rust tests (crates/trainer/tests/families.rs) compare against these
files without Python. Local use only (CI never runs it):

  cargo xtask python torch   # or any venv with torch, transformers, tokenizers
  python benches/reference/make_family_fixtures.py [FAMILY ...]

A family is one entry of FAMILIES; DeBERTa-v3 (Unigram) is added the same way.

The models and their numbers are seeded, but the `tokenizers` trainers
break ties between equally frequent merges or pieces in no fixed order
(WordPiece and Unigram differ from run to run; byte-level BPE does not), so
a rerun may give other vocabularies: the committed files, and the versions
in their meta.json, are the reference.
"""

import json
import pathlib
import platform
import random
import sys

import safetensors.torch
import tokenizers
import torch
import transformers
from tokenizers import models, normalizers, pre_tokenizers, trainers

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "crates" / "trainer" / "tests" / "fixtures" / "families"
SEED = 20261124
TOKENIZER_VOCAB = 320
TRUNCATED_LENGTH = 16

# ---- texts ------------------------------------------------------------------

BASE_TEXTS = [
    "",
    "hello",
    "Hello, world!",
    "The café served crème brûlée à la française.",
    "Ångström, naïve, coöperate, résumé, façade, jalapeño",
    "Straße und Größe; Ærøskøbing; Łódź; İstanbul",
    "e\u0301 vs \u00e9 (combining accent vs precomposed)",
    "日本語のテキストです。",
    "中文文本，没有空格。",
    "한국어 문장입니다",
    "Mixed 日本 and English 文字 text",
    "Emoji: 😀😃😄 👍🏽 🇫🇷 👨‍👩‍👧‍👦",
    "❤️ love it ❤",
    "   leading spaces",
    "trailing spaces   ",
    "many     spaces    between   words",
    "tabs\tand\t\ttabs",
    "new\nlines\n\nand\r\nreturns",
    "  \t \n  ",
    "UPPER lower MiXeD CaSe",
    "numbers 12345 3.14159 1,000,000 -42",
    "punctuation!!! ??? ... --- ;;; ::: (brackets) [square] {curly}",
    "quotes 'single' \"double\" «guillemets» „low“",
    "email@example.com https://example.org/path?q=1&r=2",
    "hyphen-ated well-known state-of-the-art",
    "don't can't won't it's",
    "Привет, как дела?",
    "مرحبا بالعالم",
    "שלום עולם",
    "नमस्ते दुनिया",
    "ελληνικά γράμματα",
    "ﬁ ligature and ｆｕｌｌｗｉｄｔｈ",
    "zero\u200bwidth\u200cjoiners\u200d",
    "a",
    "The movie was great, I loved it.",
    "Terrible acting and a boring plot.",
    "Not bad at all, would watch again!",
    "I'd give it 2/10 — disappointing.",
    "This phone's battery lasts forever 🔋",
    "Service was slow; food was cold.",
]

WORDS = (
    "the a an movie film phone food service great terrible good bad boring "
    "amazing plot acting battery screen price cheap expensive love hate "
    "café naïve 日本 中文 😀 👍 résumé Straße world hello again never always "
    "quite very not really would could should I you we they it is was"
).split()


def generated_texts(rng, n):
    out = []
    for _ in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(1, 14))]
        seps = [rng.choice([" ", " ", " ", "  ", "\t", "\n", ", ", ". ", "!"]) for _ in words]
        out.append("".join(w + s for w, s in zip(words, seps)).rstrip(" "))
    return out


def tokenizer_cases():
    rng = random.Random(SEED)
    long_text = " ".join(rng.choice(WORDS) for _ in range(700))
    cases = [(t, None) for t in BASE_TEXTS]
    cases += [(t, BASE_TEXTS[(i + 7) % len(BASE_TEXTS)]) for i, t in enumerate(BASE_TEXTS)]
    gen = generated_texts(rng, 160)
    cases += [(t, None) for t in gen[:100]]
    cases += [(gen[100 + i], gen[101 + i]) for i in range(0, 60, 2)]
    cases += [(long_text, None), (long_text, "short pair"), ("short", long_text)]
    return cases


def training_corpus():
    rng = random.Random(SEED + 1)
    return BASE_TEXTS * 3 + generated_texts(rng, 400)


# The forward/backward batch: singles and pairs, padded to the longest.
PARITY_EXAMPLES = [
    ("The café was très bon! 😀", None, 0),
    ("A much longer review of a terrible film with many words in it", "Was it bad?", 2),
    ("日本語のテキスト and some English", None, 1),
    ("short", "another pair text, quite long as well", 2),
]

# ---- tokenizers -------------------------------------------------------------

ROBERTA_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]


def wordpiece(tokenizer_class):
    def build():
        tok = tokenizers.Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tok.normalizer = normalizers.BertNormalizer(lowercase=True)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        trainer = trainers.WordPieceTrainer(
            vocab_size=TOKENIZER_VOCAB,
            special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
        )
        tok.train_from_iterator(training_corpus(), trainer)
        return tokenizer_class(vocab=tok.get_vocab(), do_lower_case=True)

    return build


def byte_level_bpe(tokenizer_class):
    def build():
        tok = tokenizers.ByteLevelBPETokenizer()
        tok.train_from_iterator(
            training_corpus(), vocab_size=TOKENIZER_VOCAB, special_tokens=ROBERTA_SPECIALS
        )
        model = json.loads(tok._tokenizer.to_str())["model"]
        merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
        return tokenizer_class(vocab=model["vocab"], merges=merges)

    return build


def unigram(tokenizer_class):
    def build():
        tok = tokenizers.SentencePieceUnigramTokenizer()
        tok.train_from_iterator(
            training_corpus(),
            vocab_size=TOKENIZER_VOCAB,
            special_tokens=ROBERTA_SPECIALS,
            unk_token="<unk>",
        )
        vocab = [tuple(v) for v in json.loads(tok._tokenizer.to_str())["model"]["vocab"]]
        return tokenizer_class(vocab=vocab)

    return build


# ---- the families -----------------------------------------------------------

TINY = dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32)


def roberta_like(config_class):
    """RoBERTa's shape: positions after pad id 1, one token type."""
    return lambda v: config_class(
        vocab_size=v, max_position_embeddings=98, type_vocab_size=1, pad_token_id=1,
        bos_token_id=0, eos_token_id=2, layer_norm_eps=1e-5, **TINY
    )


FAMILIES = {
    "bert": dict(
        tokenizer=wordpiece(transformers.BertTokenizer),
        config=lambda v: transformers.BertConfig(
            vocab_size=v, max_position_embeddings=96, **TINY
        ),
        model=transformers.BertForSequenceClassification,
    ),
    "roberta": dict(
        tokenizer=byte_level_bpe(transformers.RobertaTokenizer),
        config=roberta_like(transformers.RobertaConfig),
        model=transformers.RobertaForSequenceClassification,
    ),
    "xlm-roberta": dict(
        tokenizer=unigram(transformers.XLMRobertaTokenizer),
        config=roberta_like(transformers.XLMRobertaConfig),
        model=transformers.XLMRobertaForSequenceClassification,
    ),
    "camembert": dict(
        tokenizer=unigram(transformers.CamembertTokenizer),
        config=roberta_like(transformers.CamembertConfig),
        model=transformers.CamembertForSequenceClassification,
    ),
    "distilbert": dict(
        tokenizer=wordpiece(transformers.DistilBertTokenizer),
        config=lambda v: transformers.DistilBertConfig(
            vocab_size=v, max_position_embeddings=96, dim=16, n_layers=2, n_heads=2,
            hidden_dim=32,
        ),
        model=transformers.DistilBertForSequenceClassification,
    ),
    "electra": dict(
        tokenizer=wordpiece(transformers.BertTokenizer),
        config=lambda v: transformers.ElectraConfig(
            vocab_size=v, embedding_size=8, max_position_embeddings=96, **TINY
        ),
        model=transformers.ElectraForSequenceClassification,
    ),
}

NUM_LABELS = 3


def encode_cases(tok):
    out = []
    for text, pair in tokenizer_cases():
        full = tok(text, pair, return_token_type_ids=True)
        cut = tok(
            text, pair, truncation=True, max_length=TRUNCATED_LENGTH, return_token_type_ids=True
        )
        out.append(
            dict(
                text=text,
                pair=pair,
                ids=full["input_ids"],
                type_ids=full["token_type_ids"],
                ids_truncated=cut["input_ids"],
                type_ids_truncated=cut["token_type_ids"],
            )
        )
    return out


def make(name, spec):
    torch.manual_seed(SEED)
    tok = spec["tokenizer"]()
    config = spec["config"](len(tok))
    config.num_labels = NUM_LABELS
    config._attn_implementation = "eager"
    model = spec["model"](config)
    # Perturb every parameter so each gradient is clearly non-zero (HF's
    # init leaves biases at 0 and LayerNorm at 1).
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    model.eval()

    encoded = [tok(t, p) for t, p, _ in PARITY_EXAMPLES]
    batch = tok.pad(encoded, return_tensors="pt")
    labels = torch.tensor([label for _, _, label in PARITY_EXAMPLES])
    inputs = {k: v for k, v in batch.items() if k in tok.model_input_names}
    out = model(**inputs, labels=labels)
    out.loss.backward()

    d = OUT / name
    d.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(d, safe_serialization=True)
    tok.save_pretrained(d)
    for extra in d.iterdir():
        if extra.name not in ("config.json", "model.safetensors", "tokenizer.json"):
            extra.unlink()
    ref = {k: v.to(torch.int64).contiguous() for k, v in inputs.items()}
    ref["labels"] = labels.to(torch.int64)
    ref["logits"] = out.logits.detach().contiguous()
    ref["loss"] = out.loss.detach().reshape(1)
    for pname, p in model.named_parameters():
        ref[f"grad.{pname}"] = p.grad.detach().contiguous()
    safetensors.torch.save_file(ref, d / "reference.safetensors")
    (d / "tokenizer_cases.json").write_text(
        json.dumps(encode_cases(tok), ensure_ascii=False, separators=(",", ":"))
    )
    meta = dict(
        command=" ".join(["python benches/reference/make_family_fixtures.py", *sys.argv[1:]]),
        family=name,
        model_class=spec["model"].__name__,
        tokenizer_class=type(tok).__name__,
        examples=[dict(text=t, pair=p, label=label) for t, p, label in PARITY_EXAMPLES],
        seed=SEED,
        versions=dict(
            python=platform.python_version(),
            torch=torch.__version__,
            transformers=transformers.__version__,
            tokenizers=tokenizers.__version__,
            safetensors=safetensors.__version__,
        ),
    )
    (d / "meta.json").write_text(json.dumps(meta, ensure_ascii=False, indent=1) + "\n")
    size = sum(f.stat().st_size for f in d.iterdir())
    print(f"{name}: {size / 1024:.0f} KiB, loss {out.loss.item():.6f}")


def main():
    names = sys.argv[1:] or list(FAMILIES)
    for name in names:
        if name not in FAMILIES:
            sys.exit(f"unknown family {name!r}; known: {', '.join(FAMILIES)}")
        make(name, FAMILIES[name])


if __name__ == "__main__":
    main()
