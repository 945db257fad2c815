"""A character tokenizer for the embedded tiny model, built with Hugging Face `tokenizers` and saved
as a standard `tokenizer.json`, so `AutoTokenizer.from_pretrained(dir)` loads it like any other."""
from __future__ import annotations

import string

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"
# Digits and operators for the arithmetic task, plus letters and punctuation so that simple
# file tasks can be written in the same alphabet.
CHARS = string.digits + "+-*=()., ?:" + string.ascii_lowercase


def char_tokenizer(chars: str = CHARS) -> PreTrainedTokenizerFast:
    vocab = {PAD: 0, EOS: 1, UNK: 2}
    for c in chars:
        vocab.setdefault(c, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")  # one token per character
    tok.decoder = decoders.Fuse()  # join characters back without spaces
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=PAD, eos_token=EOS, unk_token=UNK)
