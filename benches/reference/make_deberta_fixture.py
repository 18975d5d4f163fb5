"""Writes the DeBERTa-v2 parity fixture: a tiny random
DebertaV2ForSequenceClassification with its own small Unigram tokenizer, one
forward and backward on fixed texts (pairs and padding included), and HF's
token ids for 200+ strings.

Local use only (CI reads the committed output, never runs this):

    python benches/reference/make_deberta_fixture.py \
        crates/trainer/tests/fixtures/families/deberta-v2

Needs torch, transformers, tokenizers, safetensors (the reference venv).
"""

import json
import os
import sys

import tokenizers
import torch
import transformers
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import DebertaV2Config, DebertaV2ForSequenceClassification, PreTrainedTokenizerFast

CORPUS = [
    "The new movie is awesome and the actors were great.",
    "I did not like the ending; it felt rushed and flat.",
    "Café déjà vu: naïve résumé façade über straße.",
    "東京は日本の首都です。北京是中国的首都。",
    "Emoji test 😀🎉👍 with text around them.",
    "Numbers 12345 and 3.14159 and -42 appear here.",
    "   leading spaces and    internal runs\tof whitespace\n",
    "A very long sentence " * 5,
    "Short.",
    "What a wonderful day to train a tiny model!",
    "the quick brown fox jumps over the lazy dog",
    "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG",
]

TEXTS = [
    ("The new movie is awesome", None),
    ("I did not like the ending at all, it was far too long and the plot made no sense whatsoever", None),
    ("Is it raining?", "Yes, the streets are wet and people carry umbrellas."),
    ("Café déjà vu 😀", "東京は日本の首都です"),
]
LABELS = [0, 2, 1, 2]


def tokenizer_strings():
    base = [
        "hello world", "Hello, World!", "  spaces  everywhere  ", "\ttabs\tand\nnewlines\n",
        "", " ", "a", "ü", "naïve café", "Straße", "ÅÄÖ åäö", "Ελληνικά", "русский текст",
        "中文字符测试", "日本語のテキスト", "한국어 텍스트", "😀", "👍🏽 thumbs", "🇫🇷 flag", "e\u0301 combining",
        "x" * 300, "word " * 120, "mixed 中文 and English 😀", "UPPER lower MiXeD", "tab\tsep\tvalues",
        "multi\n\nline\n\n\ntext", "punctuation!!! ??? ...", "(brackets) [square] {curly}", "email@example.com",
        "https://example.com/path?q=1", "C++ and C# and F#", "1,000,000.00", "3.14159", "-42", "0x1F",
    ]
    words = " ".join(CORPUS).split()
    for i in range(170):
        n = 1 + (i * 7) % 13
        start = (i * 11) % max(1, len(words) - n)
        base.append(" ".join(words[start:start + n]) + (" " * (i % 3)) + ("!" if i % 5 == 0 else ""))
    pairs = [(base[i], base[(i * 3 + 1) % len(base)]) for i in range(0, 60, 2)]
    return base, pairs


def make_tokenizer(out):
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Sequence([normalizers.Replace("``", '"'), normalizers.Replace("''", '"')])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    specials = ["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"]
    trainer = trainers.UnigramTrainer(vocab_size=160, special_tokens=specials, unk_token="[UNK]")
    tok.train_from_iterator(CORPUS * 4, trainer)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0",
        pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
        unk_token="[UNK]", mask_token="[MASK]", model_max_length=512,
    )
    fast.save_pretrained(out)
    return fast


def bucket_row(buckets, max_position, n):
    from transformers.models.deberta_v2.modeling_deberta_v2 import make_log_bucket_position

    rel = torch.arange(-(n - 1), n, dtype=torch.long)
    return make_log_bucket_position(rel, buckets, max_position).to(torch.long).tolist()


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    fast = make_tokenizer(out)
    for extra in ["tokenizer_config.json", "special_tokens_map.json"]:
        path = os.path.join(out, extra)
        if os.path.exists(path):
            os.remove(path)

    config = DebertaV2Config(
        vocab_size=fast.backend_tokenizer.get_vocab_size(), hidden_size=32, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=64, hidden_act="gelu", hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, max_position_embeddings=64, type_vocab_size=0,
        initializer_range=0.3, layer_norm_eps=1e-7, relative_attention=True, max_relative_positions=16,
        position_buckets=8, share_att_key=True, pos_att_type=["p2c", "c2p"], norm_rel_ebd="layer_norm",
        position_biased_input=False, pooler_hidden_size=32, pooler_dropout=0.0, pooler_hidden_act="gelu",
        num_labels=3, pad_token_id=fast.pad_token_id,
    )
    model = DebertaV2ForSequenceClassification(config)
    # HF initialises biases and LayerNorm to constants; random values make
    # every gradient path visible in the comparison.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "LayerNorm" in name:
                p.add_(0.1 * torch.randn_like(p))
    model.save_pretrained(out)
    model.train()

    firsts = [t for t, _ in TEXTS]
    seconds = [p if p is not None else None for _, p in TEXTS]
    rows = [fast(a, b, return_token_type_ids=True) if b is not None else fast(a, return_token_type_ids=True) for a, b in TEXTS]
    seq = max(len(r["input_ids"]) for r in rows)
    ids = torch.full((len(rows), seq), fast.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(rows), seq), dtype=torch.long)
    types = torch.zeros((len(rows), seq), dtype=torch.long)
    for i, r in enumerate(rows):
        n = len(r["input_ids"])
        ids[i, :n] = torch.tensor(r["input_ids"])
        mask[i, :n] = 1
        types[i, :n] = torch.tensor(r["token_type_ids"])
    labels = torch.tensor(LABELS)
    outputs = model(input_ids=ids, attention_mask=mask, token_type_ids=types, labels=labels)
    outputs.loss.backward()

    tensors = {
        "input_ids": ids.to(torch.int64), "attention_mask": mask.to(torch.int64),
        "token_type_ids": types.to(torch.int64), "labels": labels.to(torch.int64),
        "logits": outputs.logits.detach().contiguous(), "loss": outputs.loss.detach().reshape(1),
    }
    for name, p in model.named_parameters():
        tensors["grad." + name] = p.grad.detach().contiguous()

    singles, pairs = tokenizer_strings()
    tok_ids = {
        "singles": [fast(s)["input_ids"] for s in singles],
        "pairs": [[e["input_ids"], e["token_type_ids"]] for e in (fast(a, b, return_token_type_ids=True) for a, b in pairs)],
    }
    save_file(tensors, os.path.join(out, "reference.safetensors"))
    meta = {
        "command": "python benches/reference/make_deberta_fixture.py " + out,
        "texts": [[a, b] for a, b in TEXTS], "labels": LABELS, "seq_len": seq,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "tokenizers": tokenizers.__version__},
        "tokenizer_strings": {"singles": singles, "pairs": [[a, b] for a, b in pairs]},
        "tokenizer_ids": tok_ids,
        # HF's bucket of every relative distance -(n-1)..(n-1): the tiny
        # model's and DeBERTa-v3's (position_buckets 256, max 512).
        "buckets": {
            "tiny": bucket_row(8, 16, seq),
            "v3": bucket_row(256, 512, 512),
        },
    }
    with open(os.path.join(out, "meta.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, ensure_ascii=False, separators=(",", ":"))
    print("seq", seq, "loss", outputs.loss.item(), "params", sum(p.numel() for p in model.parameters()))


if __name__ == "__main__":
    main()
