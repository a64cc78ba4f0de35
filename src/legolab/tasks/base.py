"""The task contract: what every task provides, and nothing downstream assumes more.

A task is one file in this package that defines a config dataclass (with ``validate()``) and a
``Task`` subclass, and registers the pair with ``@register_task`` (the package imports every
module, so no other file changes). The task says

- what each read-out position must predict (``targets``), where it is read (``positions``) and
  which reasoning step it belongs to (its ``index``: LEGO's chain index, a ListOps node's height),
  so training can supervise a subset of indices and evaluation reports accuracy per index;
- its vocabulary (id 0 is always ``[PAD]``), sequence length, classes and boundary tokens;
- its default sizes (training / test set, supervised indices);
- optionally: shorter or longer variants (``with_length``, for curricula and extrapolation),
  token roles analyses may ask for, extra read-outs (``operand_readouts``) and a text form.

Randomness is counter-based: example i of a split is the same however a dataset is batched or
sliced.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from ..errors import ConfigError

PAD, BOS, EOS = "[PAD]", "[BOS]", "[EOS]"
# Token ids are int32: half the memory traffic of int64, and torch embeddings take them.
TOKEN_DTYPE = np.int32


class Vocab:
    """Token strings <-> ids. Id 0 is always padding (models and evaluation rely on it)."""

    def __init__(self, tokens: list[str]):
        if len(set(tokens)) != len(tokens):
            raise ValueError("duplicate tokens in vocabulary")
        if not tokens or tokens[0] != PAD:
            raise ValueError(f"a vocabulary starts with {PAD} (id 0 is padding)")
        self.tokens = list(tokens)
        self.ids = {t: i for i, t in enumerate(self.tokens)}

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, token: str) -> int:
        return self.ids[token]

    def encode(self, tokens: list[str]) -> list[int]:
        return [self.ids[t] for t in tokens]

    def decode(self, ids) -> list[str]:
        return [self.tokens[int(i)] for i in ids]


@dataclass
class Batch:
    """A batch of examples as numpy arrays (converted to tensors by the training code).
    Token ids are int32; the other arrays may be any small integer type.

    tokens:    (B, T) token ids, PAD-padded
    positions: (B, P) index into T of each read-out token
    targets:   (B, P) class id each read-out must predict
    index:     (B, P) reasoning-step index of each read-out (LEGO: chain index), -1 for padding
    meta:      task-specific arrays, e.g. LEGO's chain-order variables and values
    """

    tokens: np.ndarray
    positions: np.ndarray
    targets: np.ndarray
    index: np.ndarray
    meta: dict[str, np.ndarray] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, sl) -> Batch:
        return Batch(self.tokens[sl], self.positions[sl], self.targets[sl], self.index[sl],
                     {k: v[sl] for k, v in self.meta.items()})

    @staticmethod
    def concat(batches: list[Batch]) -> Batch:
        return Batch(*(np.concatenate([getattr(b, f) for b in batches]) for f in ("tokens", "positions", "targets", "index")),
                     {k: np.concatenate([b.meta[k] for b in batches]) for k in batches[0].meta})


class Task:
    """The interface training, evaluation and analysis rely on; subclass it and register it.

    Required: ``name``, ``config_class``, ``__init__(config, seed)`` setting ``vocab``,
    ``num_classes``, ``num_indices`` and ``seq_len``, and ``sample``. The rest has defaults.
    """

    name: ClassVar[str]
    config_class: ClassVar[type]   # a dataclass with validate() raising ConfigError
    index_name: ClassVar[str] = "index"  # what an index is, in reports ("variable", "height", ...)
    vocab: Vocab
    num_classes: int               # classes a read-out predicts
    num_indices: int               # distinct reasoning-step indices (LEGO: chain length n)
    seq_len: int                   # token length of every example (max length if examples are padded)
    special_ids: tuple[int, ...] = ()  # boundary tokens (LEGO: BOS, EOS), which LEGO attention broadcasts from

    def __init__(self, config, seed: int = 0):
        config.validate()
        self.config, self.seed = config, seed

    def sample(self, split: str, indices) -> Batch:
        """Examples ``indices`` of ``split``; example i depends only on (config, seed, split, i)."""
        raise NotImplementedError

    def class_names(self) -> list[str]:
        return [str(i) for i in range(self.num_classes)]

    def default_sizes(self) -> dict[str, int]:
        """Unset ``train.train_size`` / ``train.test_size`` / ``train.n_tr`` (0: every index)."""
        return {"train_size": 10_000, "test_size": 1_000, "n_tr": 0}

    def with_length(self, num_indices: int, seed: int | None = None) -> Task:
        """The same task (same vocabulary and classes) with ``num_indices`` indices: curricula, mixed
        lengths and length extrapolation use it. Tasks without length variants leave it out."""
        raise NotImplementedError

    def token_roles(self) -> dict[str, list[int]]:
        """Token ids by role, for analyses: ``query`` are the tokens whose repeats association
        scores look at (LEGO: variable names), ``special`` the boundary tokens."""
        specials = set(self.special_ids)
        return {"query": [i for i in range(1, len(self.vocab)) if i not in specials], "special": list(self.special_ids)}

    # operand_readouts(batch) -> (positions, targets, index): extra read-outs of intermediate
    # values, for train.aux_operand; defined only by tasks that have them (LEGO).

    def format_example(self, batch: Batch, i: int, notation: str | None = None) -> str:
        """One line of text for example i: its tokens, a tab, and each index's answer."""
        if notation is not None:
            raise ConfigError(f"--notation: task {self.name!r} has one text form")
        words = [t for t in self.vocab.decode(batch.tokens[i]) if t != PAD]
        names = self.class_names()
        answers = [f"{self.index_name}{int(s)}@{int(p)}:{names[int(t)]}"
                   for p, t, s in zip(batch.positions[i], batch.targets[i], batch.index[i]) if s >= 0]
        return " ".join(words) + "\t" + " ".join(answers)

    def describe_example(self, batch: Batch, i: int, notation: str | None = None) -> dict:
        """Example i as a JSON-able record."""
        valid = batch.index[i] >= 0
        names = self.class_names()
        return {"tokens": batch.tokens[i].tolist(), "text": self.format_example(batch, i, notation).split("\t")[0],
                "positions": batch.positions[i][valid].tolist(), "index": batch.index[i][valid].tolist(),
                "targets": [names[int(t)] for t in batch.targets[i][valid]]}

    def solve_text(self, line: str, verbose: bool = False) -> str:
        """Parse one example in the task's text form and answer it with an independent evaluator
        (``legolab solve --task NAME``) in ``format_example``'s form, or in full (``verbose``);
        errors are ParseError naming the place and the reason."""
        raise NotImplementedError


def supports(task: Task, method: str) -> bool:
    """Whether ``task`` implements an optional part of the contract."""
    impl = getattr(type(task), method, None)
    return impl is not None and impl is not getattr(Task, method, None)


# ---- per-index randomness -----------------------------------------------------------------
# Example i of (seed, split) reads its random words from block i // BLOCK of a PCG64 stream
# keyed by (seed, split, block): a whole batch is drawn with a few vectorised calls, and any
# example can be drawn without drawing the ones before it. random_raw is numpy's stable raw
# bit stream, so the bytes do not depend on the numpy version's sampling algorithms.

BLOCK = 1024


def split_key(split: str) -> int:
    return zlib.crc32(split.encode())


def random_words(seed: int, split: str, indices: np.ndarray, width: int) -> np.ndarray:
    """(len(indices), width) uniform uint64 words; row i depends only on (seed, split, indices[i])."""
    indices = np.asarray(indices, dtype=np.int64).reshape(-1)
    if not len(indices):
        return np.empty((0, width), dtype=np.uint64)
    lo, hi = int(indices.min()), int(indices.max())
    if lo < 0:
        raise ValueError("example indices must be non-negative")
    contiguous = hi - lo + 1 == len(indices) and (len(indices) == 1 or bool((np.diff(indices) == 1).all()))
    blocks = np.arange(lo // BLOCK, hi // BLOCK + 1) if contiguous else np.unique(indices // BLOCK)
    raw = np.empty((len(blocks), BLOCK, width), dtype=np.uint64)
    key = split_key(split)
    for i, b in enumerate(blocks.tolist()):
        bits = np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(key, b)))
        raw[i] = bits.random_raw(BLOCK * width).reshape(BLOCK, width)
    if contiguous:  # the common case (a dataset, a training step): a slice, no gather
        start = lo - int(blocks[0]) * BLOCK
        return raw.reshape(-1, width)[start:start + len(indices)]
    return raw[np.searchsorted(blocks, indices // BLOCK), indices % BLOCK]


def random_u32(words: np.ndarray) -> np.ndarray:
    """Split (B, W) 64-bit words into (B, 2W) 32-bit values (as uint64), endianness-independent."""
    return np.concatenate([words >> np.uint64(32), words & np.uint64(0xFFFFFFFF)], axis=1)


def uniform_ints(u32: np.ndarray, k) -> np.ndarray:
    """Map uniform 32-bit values to integers in [0, k) (multiply-shift; bias below k / 2**32)."""
    return ((u32 * np.asarray(k, dtype=np.uint64)) >> np.uint64(32)).astype(np.int64)


def random_permutations(u32: np.ndarray) -> np.ndarray:
    """A uniform random permutation per row from (B, m) 32-bit keys.

    The column index breaks ties, so keys are distinct and every sort algorithm agrees; a tie
    (probability ~m^2 / 2^33 per row) only nudges uniformity, never determinism.
    """
    m = u32.shape[1]
    keys = ((u32 << np.uint64(16)) | np.arange(m, dtype=np.uint64)).view(np.int64)
    return np.argsort(keys, axis=1)
