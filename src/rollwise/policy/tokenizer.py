"""A character tokenizer for the embedded tiny model, built with Hugging Face `tokenizers` and saved
as a standard `tokenizer.json`, so `AutoTokenizer.from_pretrained(dir)` loads it like any other.

The alphabet: `CHARS` (ids 3.. in its order, after <pad>, <eos>, <unk>), then any extra characters a
warm start adds, in sorted order, after it (a file task's base adds every character of its rows, and
`warmstart.extra_chars`; see `policy/warmstart.py`). The ids of `CHARS` never change, so the shipped
bases and a base with a grown alphabet agree on them.
"""
from __future__ import annotations

import string

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"
# Digits and operators for the arithmetic task, plus letters and punctuation so that simple
# file tasks can be written in the same alphabet.
CHARS = string.digits + "+-*=()., ?:" + string.ascii_lowercase


def extend_alphabet(*texts: str) -> str:
    """`CHARS` followed by every other character of `texts`, sorted (the alphabet of a grown base)."""
    base = set(CHARS)
    return CHARS + "".join(sorted({c for t in texts for c in t} - base))


def char_tokenizer(chars: str = CHARS) -> PreTrainedTokenizerFast:
    vocab = {PAD: 0, EOS: 1, UNK: 2}
    for c in chars:
        vocab.setdefault(c, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    # One token per character. "[\s\S]", not ".": Oniguruma's "." does not match "\n", and the text
    # between matches stays one piece, so "\n\n" would have been a single (unknown) token.
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()  # join characters back without spaces
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=PAD, eos_token=EOS, unk_token=UNK)
