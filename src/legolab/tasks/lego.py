"""LEGO (Zhang et al. 2022, section 2 and appendix B.1): a shuffled chain of clauses over a group.

A sentence with n clauses assigns variables x_0 .. x_{n-1} along one chain rooted at the identity:

    x_0 = g_0 1,   x_i = g_i x_{i-1}   (value(x_i) = g_i * value(x_{i-1}), a left action)

Every value is a fresh uniform draw and each operator is chosen to agree with it
(g_i = v_i * v_{i-1}^-1), exactly the paper's B.1 procedure. The clauses are shuffled uniformly
and written as ``[BOS] x = g y ; x = g y ; ... [EOS]``: five tokens a clause, so clause slot j
starts at position 1 + 5 j, and that token (the assigned variable) is where its value is read.
"""

from __future__ import annotations

import dataclasses
import os
import string
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..errors import ConfigError
from ..groups import ROOT_TOKEN, Group, get_group
from . import register_task
from .base import BOS, EOS, PAD, TOKEN_DTYPE, Batch, Task, Vocab, random_permutations, random_u32, random_words, uniform_ints
from .lego_text import Clause, format_sentence, parse_sentence, solve

CLAUSE_LEN = 5
EQ, SEMI = "=", ";"
MAX_VARS = 26 * 10
_CHUNK = 4096
_THREADS = min(4, os.cpu_count() or 1)


def variable_names(count: int) -> list[str]:
    """a..z, then a1..z1, a2..z2, ... (a larger alphabet for long chains)."""
    letters = string.ascii_lowercase
    return [letters[i % 26] + ("" if i < 26 else str(i // 26)) for i in range(count)]


@dataclass
class LegoConfig:
    group: str = "sign"        # sign (= z2, Task 1), d3 (Task 2), zK, dK, sK, or a Cayley-table file
    n: int = 12                # clauses (variables) per sentence
    n_vars: int = 26           # size of the variable alphabet; each sentence uses n distinct names
    n_min: int | None = None   # if set, each sentence has a uniform length in [n_min, n] (padded)

    def validate(self) -> None:
        if not isinstance(self.n, int) or not 1 <= self.n <= MAX_VARS:
            raise ConfigError(f"task.n: must be an integer between 1 and {MAX_VARS} (one variable per clause), "
                              f"got {self.n!r}")
        if not isinstance(self.n_vars, int) or not self.n <= self.n_vars <= MAX_VARS:
            raise ConfigError(f"task.n_vars: must be between task.n={self.n} and {MAX_VARS}, got {self.n_vars!r}")
        if self.n_min is not None and not (isinstance(self.n_min, int) and 1 <= self.n_min <= self.n):
            raise ConfigError(f"task.n_min: must be between 1 and n={self.n}, got {self.n_min!r}")
        get_group(self.group)


@register_task
class LegoTask(Task):
    """LEGO sentences over a finite group: predict every variable's value (paper section 2)."""

    name: ClassVar[str] = "lego"
    config_class: ClassVar[type] = LegoConfig
    index_name: ClassVar[str] = "variable"

    def __init__(self, config: LegoConfig, seed: int = 0):
        super().__init__(config, seed)
        self.group: Group = get_group(config.group)
        self.variables = variable_names(config.n_vars)
        self.vocab = Vocab([PAD, BOS, EOS, EQ, SEMI, ROOT_TOKEN, *self.group.names, *self.variables])
        self.element0 = self.vocab[self.group.names[0]]
        self.var0 = self.vocab[self.variables[0]]
        self.num_classes = self.group.order
        self.num_indices = config.n
        self.seq_len = 2 + CLAUSE_LEN * config.n
        self.special_ids = (self.vocab[BOS], self.vocab[EOS])

    def class_names(self) -> list[str]:
        return list(self.group.value_names)

    def default_sizes(self) -> dict[str, int]:
        """The paper's sizes: 10^4 n training and 10^3 n test sentences, the first 6 variables supervised."""
        n = self.config.n
        return {"train_size": 10_000 * n, "test_size": 1_000 * n, "n_tr": min(6, n)}

    def with_length(self, num_indices: int, seed: int | None = None) -> LegoTask:
        """Sentences of exactly ``num_indices`` clauses over the same alphabet (grown if a longer
        chain needs more names, which keeps the ids of the existing ones)."""
        config = dataclasses.replace(self.config, n=num_indices, n_min=None, n_vars=max(self.config.n_vars, num_indices))
        return LegoTask(config, seed=self.seed if seed is None else seed)

    def token_roles(self) -> dict[str, list[int]]:
        return {"query": [self.vocab[v] for v in self.variables], "special": list(self.special_ids)}

    def sample(self, split: str, indices) -> Batch:
        """Examples ``indices`` of ``split`` (any split name is its own random stream).

        Large requests are filled in cache-sized chunks on a few threads (numpy releases the GIL
        in these kernels); each example depends only on its own index, so the bytes are the same.
        """
        indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        B, n = len(indices), self.config.n
        small = np.int16  # positions < 1302, classes <= 720, steps < 260: a quarter of int64's traffic
        out = Batch(np.empty((B, self.seq_len), dtype=TOKEN_DTYPE),
                    np.empty((B, n), dtype=small), np.empty((B, n), dtype=small), np.empty((B, n), dtype=small),
                    {key: np.empty((B, n), dtype=small) for key in ("variables", "values", "ops")})
        chunks = [slice(lo, min(lo + _CHUNK, B)) for lo in range(0, B, _CHUNK)]
        if len(chunks) > 1 and _THREADS > 1:
            with ThreadPoolExecutor(_THREADS) as pool:
                list(pool.map(lambda sl: self._fill(split, indices[sl], out[sl]), chunks))
        else:
            for sl in chunks:
                self._fill(split, indices[sl], out[sl])
        return out

    def _fill(self, split: str, indices: np.ndarray, out: Batch) -> None:
        n, V, k = self.config.n, self.config.n_vars, self.group.order
        B = len(indices)
        u32 = random_u32(random_words(self.seed, split, indices, (V + 2 * n + 2) // 2))
        # names[b, c]: variable id of chain variable c (n distinct names out of V).
        names = random_permutations(u32[:, :V])[:, :n]
        values = uniform_ints(u32[:, V:V + n], k)
        prev = np.zeros_like(values)  # the root's value is the identity
        prev[:, 1:] = values[:, :-1]
        ops = self.group.table[values, self.group.inverse[prev]]
        order_keys = u32[:, V + n:V + 2 * n]
        if self.config.n_min is not None:
            length = self.config.n_min + uniform_ints(u32[:, V + 2 * n], n - self.config.n_min + 1)
            # Clauses beyond an example's length sort last and become padding.
            order_keys = np.where(np.arange(n) >= length[:, None], np.uint64(0xFFFFFFFF), order_keys)
        # perm[b, j]: chain index of the clause in sentence slot j; gathers go through flat indices.
        perm = random_permutations(order_keys)
        flat = perm + (np.arange(B) * n)[:, None]
        lhs = names + self.var0
        operand = np.empty_like(lhs)
        operand[:, 0] = self.vocab[ROOT_TOKEN]
        operand[:, 1:] = lhs[:, :-1]

        tokens = out.tokens
        tokens[:, 0] = self.vocab[BOS]
        tokens[:, 1:-1:CLAUSE_LEN] = lhs.ravel().take(flat)
        tokens[:, 2:-1:CLAUSE_LEN] = self.vocab[EQ]
        tokens[:, 3:-1:CLAUSE_LEN] = (ops + self.element0).ravel().take(flat)
        tokens[:, 4:-1:CLAUSE_LEN] = operand.ravel().take(flat)
        tokens[:, 5:-1:CLAUSE_LEN] = self.vocab[SEMI]
        tokens[:, -1] = self.vocab[EOS]
        out.positions[:] = 1 + CLAUSE_LEN * np.arange(n)
        out.targets[:] = values.ravel().take(flat)
        out.index[:] = perm
        out.meta["variables"][:] = names
        out.meta["values"][:] = values
        out.meta["ops"][:] = ops
        if self.config.n_min is not None:
            pad = np.arange(n) >= length[:, None]
            tokens[:, 1:-1][np.repeat(pad, CLAUSE_LEN, axis=1)] = self.vocab[PAD]
            tokens[:, -1] = self.vocab[PAD]
            tokens[np.arange(B), 1 + CLAUSE_LEN * length] = self.vocab[EOS]
            out.index[pad] = -1
            out.targets[pad] = 0

    def operand_readouts(self, batch: Batch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Intermediate read-outs at the operand tokens (position +3 of every clause): the value
        of the operand variable x_{k-1} of clause k, with chain index k - 1 as its step (-1 for
        the root clause, whose operand is the constant). These are the labels of the earlier
        variables, read where the association head writes them."""
        k = batch.index.astype(np.int64)
        prev = np.clip(k - 1, 0, None)
        values = np.take_along_axis(batch.meta["values"].astype(np.int64), prev, 1)
        steps = np.where(k >= 1, k - 1, -1)
        return batch.positions.astype(np.int64) + 3, np.where(steps >= 0, values, 0), steps

    # ---- text -----------------------------------------------------------------------------
    def clauses(self, tokens) -> list[Clause]:
        """The clauses of one tokenised example, in sentence order."""
        words = [t for t in self.vocab.decode(tokens) if t not in (PAD, BOS, EOS)]
        return [Clause(words[i], words[i + 2], words[i + 3]) for i in range(0, len(words), CLAUSE_LEN)]

    def answers(self, batch: Batch, i: int) -> list[tuple[str, str]]:
        """(variable, printed value) of example i in chain order."""
        m = int((batch.index[i] >= 0).sum())
        return [(self.variables[batch.meta["variables"][i, c]], self.group.value_names[batch.meta["values"][i, c]])
                for c in range(m)]

    def format_example(self, batch: Batch, i: int, notation: str | None = None) -> str:
        if notation == "code" and self.group.names != ("+", "-"):
            raise ConfigError("--notation code (val/not) is only defined for the sign group")
        answers = self.answers(batch, i)
        return (format_sentence(self.clauses(batch.tokens[i]), notation or "paper") + "\t"
                + " ".join(f"{v}:{x}" for v, x in answers))

    def describe_example(self, batch: Batch, i: int, notation: str | None = None) -> dict:
        answers = self.answers(batch, i)
        m = len(answers)
        return {"sentence": format_sentence(self.clauses(batch.tokens[i]), notation or "paper"),
                "chain": [v for v, _ in answers], "values": {v: x for v, x in answers},
                "index": batch.index[i, :m].tolist(), "positions": batch.positions[i, :m].tolist(),
                "ops": [self.group.names[g] for g in batch.meta["ops"][i, :m]], "tokens": batch.tokens[i].tolist()}

    def solve_text(self, line: str, verbose: bool = False) -> str:
        clauses = parse_sentence(line, self.group)
        chain = solve(clauses, self.group)
        if verbose:
            return "\n".join(f"#{step} {var} = {self.group.value_names[value]}" for step, (var, value) in enumerate(chain))
        return format_sentence(clauses) + "\t" + " ".join(f"{v}:{self.group.value_names[x]}" for v, x in chain)

    def encode_clauses(self, clauses: list[Clause]) -> np.ndarray:
        """Token ids of a parsed sentence (for running a model on a user's sentence)."""
        ids = [self.vocab[BOS]]
        for c in clauses:
            for name in (c.lhs, c.operand):
                if name != ROOT_TOKEN and name not in self.vocab.ids:
                    raise ConfigError(f"variable {name!r} is not in this task's alphabet ({self.variables[0]}..{self.variables[-1]})")
            ids += [self.vocab[c.lhs], self.vocab[EQ], self.vocab[c.op], self.vocab[c.operand], self.vocab[SEMI]]
        return np.array(ids + [self.vocab[EOS]], dtype=TOKEN_DTYPE)
