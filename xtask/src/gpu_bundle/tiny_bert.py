"""A small random BERT classifier in a Hugging Face directory, made with
transformers on the GPU machine (the bundle cannot carry a real checkpoint).
Words become character pieces, so any English text tokenizes.

    python3 tiny_bert.py OUT_DIR
"""
import os
import string
import sys

import torch
from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
chars = string.ascii_lowercase + string.digits
vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
vocab += list(chars + string.punctuation) + ["##" + c for c in chars]
with open(os.path.join(out, "vocab.txt"), "w") as f:
    f.write("\n".join(vocab) + "\n")
BertTokenizerFast(vocab_file=os.path.join(out, "vocab.txt"), do_lower_case=True).save_pretrained(out)
torch.manual_seed(0)
config = BertConfig(
    vocab_size=len(vocab),
    hidden_size=128,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=256,
    max_position_embeddings=128,
    num_labels=2,
)
BertForSequenceClassification(config).save_pretrained(out)
print(f"tiny BERT classifier in {out}")
