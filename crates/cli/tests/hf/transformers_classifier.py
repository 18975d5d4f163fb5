"""transformers' side of the `memtune train` / `memtune predict` round trips.

    python transformers_classifier.py logits TEXTS.jsonl MODEL_DIR [MODEL_DIR ...]
        Loads each MODEL_DIR with AutoTokenizer and
        AutoModelForSequenceClassification.from_pretrained and prints one
        JSON line per directory: {"model": MODEL_DIR, "class": the loaded
        class, "logits": [[...] per line of TEXTS.jsonl]} ({"text": ...,
        optional "text_pair": ...}; float32 model, eval mode, one text at a
        time). Fails if from_pretrained initialised any weight itself (a
        tensor it did not find under its own name).

    python transformers_classifier.py make OUT_DIR FAMILY [FAMILY ...]
        Saves, for each FAMILY (a key of FAMILIES), a tiny random
        *ForSequenceClassification (3 labels) and a small tokenizer of the
        family's kind into OUT_DIR/FAMILY with save_pretrained, as a user of
        transformers would.

One process serves many directories, so the tests pay torch's import once.
"""

import json
import sys
from pathlib import Path

import tokenizers
import torch
import transformers
from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

WORDS = (
    "the a film movie good bad great awful plot acting was is not very "
    "really story end love hate boring fun loved every minute of it worst "
    "ever funny and I"
).split()
CORPUS = [
    " ".join(WORDS[i:] + WORDS[:i]) + (", really!" if i % 2 else ".") for i in range(len(WORDS))
]
TOKENIZER_VOCAB = 200
ROBERTA_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
BERT_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def wordpiece():
    tokens = BERT_SPECIALS + WORDS + ["##s", "##ing", "##ly", ",", ".", "!", ";"]
    return transformers.BertTokenizer(
        vocab={t: i for i, t in enumerate(dict.fromkeys(tokens))}, do_lower_case=True
    )


def byte_level_bpe():
    tok = tokenizers.ByteLevelBPETokenizer()
    tok.train_from_iterator(CORPUS, vocab_size=TOKENIZER_VOCAB, special_tokens=ROBERTA_SPECIALS)
    model = json.loads(tok._tokenizer.to_str())["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    return transformers.RobertaTokenizer(vocab=model["vocab"], merges=merges)


def unigram(tokenizer_class, specials, unk):
    def build():
        tok = tokenizers.SentencePieceUnigramTokenizer()
        tok.train_from_iterator(
            CORPUS * 3, vocab_size=TOKENIZER_VOCAB, special_tokens=specials, unk_token=unk
        )
        vocab = [tuple(v) for v in json.loads(tok._tokenizer.to_str())["model"]["vocab"]]
        return tokenizer_class(vocab=vocab)

    return build


TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
ROBERTA_SHAPE = dict(
    TINY, max_position_embeddings=130, type_vocab_size=1, pad_token_id=1, bos_token_id=0,
    eos_token_id=2, layer_norm_eps=1e-5,
)

# model_type -> (tokenizer builder, config fields besides vocab_size).
FAMILIES = {
    "bert": (wordpiece, dict(TINY, max_position_embeddings=128)),
    "roberta": (byte_level_bpe, ROBERTA_SHAPE),
    "xlm-roberta": (
        unigram(transformers.XLMRobertaTokenizer, ROBERTA_SPECIALS, "<unk>"),
        ROBERTA_SHAPE,
    ),
    "camembert": (
        unigram(transformers.CamembertTokenizer, ROBERTA_SPECIALS, "<unk>"),
        ROBERTA_SHAPE,
    ),
    "distilbert": (
        wordpiece,
        dict(dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_position_embeddings=128),
    ),
    "electra": (wordpiece, dict(TINY, embedding_size=16, max_position_embeddings=128)),
    "deberta-v2": (
        unigram(
            transformers.DebertaV2Tokenizer, ["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"], "[UNK]"
        ),
        dict(
            TINY, max_position_embeddings=128, type_vocab_size=0, relative_attention=True,
            max_relative_positions=32, position_buckets=16, share_att_key=True,
            pos_att_type=["p2c", "c2p"], norm_rel_ebd="layer_norm", position_biased_input=False,
            pooler_hidden_size=32, pooler_hidden_act="gelu", layer_norm_eps=1e-7, pad_token_id=0,
        ),
    ),
}


def logits(texts_path, model_dirs):
    records = [json.loads(line) for line in Path(texts_path).read_text().splitlines() if line.strip()]
    for model_dir in model_dirs:
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        model, info = AutoModelForSequenceClassification.from_pretrained(
            model_dir, output_loading_info=True
        )
        if info["missing_keys"] or info["mismatched_keys"]:
            sys.exit(f"{model_dir}: transformers initialised weights itself: {info}")
        model.eval()
        rows = []
        with torch.no_grad():
            for record in records:
                args = [record["text"]]
                if record.get("text_pair"):
                    args.append(record["text_pair"])
                encoded = tokenizer(*args, return_tensors="pt", truncation=True, max_length=128)
                rows.append([float(v) for v in model(**encoded).logits[0]])
        print(json.dumps({"model": str(model_dir), "class": type(model).__name__, "logits": rows}))


def make(out_dir, families):
    for family in families:
        if family not in FAMILIES:
            sys.exit(f"unknown family {family!r}; known: {', '.join(FAMILIES)}")
        build_tokenizer, fields = FAMILIES[family]
        torch.manual_seed(0)
        out = Path(out_dir) / family
        out.mkdir(parents=True, exist_ok=True)
        tokenizer = build_tokenizer()
        config = AutoConfig.for_model(
            family,
            vocab_size=len(tokenizer),
            num_labels=3,
            # Wider than the usual 0.02, so logits differ by more than rounding.
            initializer_range=0.3,
            id2label={0: "negative", 1: "neutral", 2: "positive"},
            label2id={"negative": 0, "neutral": 1, "positive": 2},
            **fields,
        )
        model = AutoModelForSequenceClassification.from_config(config)
        # Non-trivial LayerNorm and bias values, so a loader that skipped
        # them would be caught.
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith("bias") or "LayerNorm" in name or "layer_norm" in name:
                    p.add_(0.1 * torch.randn_like(p))
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "logits":
        logits(sys.argv[2], sys.argv[3:])
    elif len(sys.argv) >= 4 and sys.argv[1] == "make":
        make(sys.argv[2], sys.argv[3:])
    else:
        sys.exit(__doc__)
