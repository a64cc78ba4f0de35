"""Template tasks with unseen symbols (Boix-Adsera et al. 2024, "When can transformers reason with
abstract symbols?", seed 004).

A template is a string over wildcards (upper-case letters) and fixed tokens (lower-case letters),
with a label: ``ABA -> 0``, ``ABB -> 1``. An example fills the template's wildcards injectively
(distinct wildcards, distinct symbols) from a symbol alphabet; fixed tokens stay. The training
split draws symbols from the training alphabet, the validation split from its own and every other
split from a test alphabet, all three disjoint (as in the seed's code), so test symbols are never
seen in training: the model must learn the relation (which positions hold equal symbols), not the
symbols. Templates equivalent under renaming wildcards (ABA, BAB)
are refused, as in the seed's code.

Sequence: the filled template, then ``[CLS]``, read at ``[CLS]`` (the seed's model reads its
appended CLS token): one read-out per example, step 0. Labels are classes, or, when a template's
label is a wildcard letter (``ABA:B``), the symbol that wildcard took (the copy setting: the
classes are the vocabulary).

The seed's convention: the number of training samples equals the size of the training alphabet
(``default_sizes``), so a sweep over ``train_symbols`` is a sweep over data.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..errors import ConfigError
from . import register_task
from .base import PAD, TOKEN_DTYPE, Batch, Task, Vocab, random_u32, random_words, uniform_ints

CLS = "[CLS]"
MAX_SYMBOLS = 1 << 20


def _majority(k: int) -> str:
    """Length-k majority: every {A, B} string starting with A; label 1 when A (the first symbol)
    occurs more than k/2 times (our reading: the seed's exact rule lives in its notebook)."""
    words = ("A" + "".join(rest) for rest in itertools.product("AB", repeat=k - 1))
    return ",".join(f"{w}:{int(w.count('A') * 2 > k)}" for w in words)


NAMED = {
    "aba-abb": "ABA:0,ABB:1",
    "aabb-abab": "AABB:0,ABAB:1",
    "same-different": "AA:0,AB:1",
    **{f"majority-{k}": _majority(k) for k in (2, 3, 4, 5, 6, 7, 8)},
}


@dataclass
class TemplateConfig:
    templates: str = "aba-abb"   # a named set (aba-abb, aabb-abab, same-different, majority-K),
                                 # "random", or "TEMPLATE:LABEL,..." such as "ABA:0,ABB:1" or "ABA:B"
    train_symbols: int = 64      # training alphabet size (= training samples by default)
    test_symbols: int = 1024     # test alphabet size (the test split and any other split but train and valid)
    valid_symbols: int = 1024    # validation alphabet size (chooses the best checkpoint)
    # random template sets (templates: random), drawn from template_seed
    n_templates: int = 4
    length: int = 4
    n_wildcards: int = 3         # wildcard alphabet of the random templates
    n_fixed: int = 0             # fixed-token alphabet of the random templates
    template_seed: int = 0

    def validate(self) -> None:
        def bad(key, why):
            raise ConfigError(f"task.{key}: {why}, got {getattr(self, key)!r}")

        for key in ("train_symbols", "test_symbols", "valid_symbols"):
            v = getattr(self, key)
            if not isinstance(v, int) or not 1 <= v <= MAX_SYMBOLS:
                bad(key, f"must be an integer in 1..{MAX_SYMBOLS}")
        if self.templates == "random":
            if not isinstance(self.n_templates, int) or self.n_templates < 2:
                bad("n_templates", "must be at least 2")
            if not isinstance(self.length, int) or not 1 <= self.length <= 64:
                bad("length", "must be an integer in 1..64")
            if not isinstance(self.n_wildcards, int) or not 1 <= self.n_wildcards <= 26:
                bad("n_wildcards", "must be an integer in 1..26")
            if not isinstance(self.n_fixed, int) or not 0 <= self.n_fixed <= 26:
                bad("n_fixed", "must be an integer in 0..26")
            if not isinstance(self.template_seed, int) or self.template_seed < 0:
                bad("template_seed", "must be a non-negative integer")
        templates = self.template_list()
        wildcards = max(len(set(filter(str.isupper, t))) for t, _ in templates)
        for key in ("train_symbols", "test_symbols", "valid_symbols"):
            if getattr(self, key) < wildcards:
                bad(key, f"must be at least the {wildcards} wildcards of one template (fills are injective)")

    def template_list(self) -> list[tuple[str, str]]:
        """[(template, label)], validated: equal lengths, distinct up to renaming wildcards."""
        spec = random_templates(self) if self.templates == "random" else NAMED.get(self.templates, self.templates)
        if not isinstance(spec, str) or not spec:
            raise ConfigError(f"task.templates: expected a named set ({', '.join(NAMED)}), random, "
                              f"or TEMPLATE:LABEL pairs such as ABA:0,ABB:1, got {self.templates!r}")
        out, seen = [], {}
        for item in spec.split(","):
            m = re.fullmatch(r"\s*([A-Za-z]+)\s*:\s*([0-9]+|[A-Z])\s*", item)
            if not m:
                raise ConfigError(f"task.templates: {item.strip()[:40]!r} is not TEMPLATE:LABEL (wildcards A-Z, fixed "
                                  "tokens a-z; a label is a class number or one of the template's wildcards)")
            template, label = m.groups()
            if label.isalpha() and label not in template:
                raise ConfigError(f"task.templates: label {label} of {template} is not one of its wildcards")
            key = canonical(template)
            if key in seen:
                raise ConfigError(f"task.templates: {template} is {seen[key]} with wildcards renamed")
            seen[key] = template
            out.append((template, label))
        if len({len(t) for t, _ in out}) > 1:
            raise ConfigError("task.templates: every template must have the same length")
        if len({label.isdigit() for _, label in out}) > 1:
            raise ConfigError("task.templates: labels are all class numbers or all wildcards (copy), not a mix")
        if len(out) < 2:
            raise ConfigError("task.templates: give at least two templates")
        return out


def canonical(template: str) -> str:
    """The template with wildcards renamed in order of first appearance (ABA, BAB -> ABA)."""
    names: dict[str, str] = {}
    return "".join(names.setdefault(c, chr(65 + len(names))) if c.isupper() else c for c in template)


def random_templates(cfg: TemplateConfig) -> str:
    """``n_templates`` pairwise inequivalent random templates with random binary labels."""
    rng = np.random.default_rng([cfg.template_seed, 0x7E])
    alphabet = [chr(65 + i) for i in range(cfg.n_wildcards)] + [chr(97 + i) for i in range(cfg.n_fixed)]
    found: dict[str, str] = {}
    for _ in range(10_000 * cfg.n_templates):
        t = "".join(rng.choice(alphabet, cfg.length))
        if any(c.isupper() for c in t) and canonical(t) not in found:
            found[canonical(t)] = t
            if len(found) == cfg.n_templates:
                labels = rng.permutation(np.arange(cfg.n_templates) % 2)
                return ",".join(f"{t}:{int(y)}" for t, y in zip(found.values(), labels))
    raise ConfigError(f"task.n_templates: only {len(found)} inequivalent templates of length {cfg.length} exist "
                      f"over {cfg.n_wildcards} wildcards and {cfg.n_fixed} fixed tokens")


def distinct_draws(u32: np.ndarray, n: int) -> np.ndarray:
    """(B, k) distinct integers in [0, n) per row, uniform over ordered k-subsets, from (B, k)
    32-bit values: draw r_j in [0, n - j), then step it past the values already taken."""
    B, k = u32.shape
    out = np.empty((B, k), dtype=np.int64)
    for j in range(k):
        r = uniform_ints(u32[:, j], n - j)
        taken = np.sort(out[:, :j], axis=1)
        for c in range(j):  # ascending: r becomes the r-th value not yet taken
            r += r >= taken[:, c]
        out[:, j] = r
    return out


@register_task
class TemplateTask(Task):
    """Templates over wildcards with symbols unseen in training (seed 004): classify the template."""

    name: ClassVar[str] = "template"
    config_class: ClassVar[type] = TemplateConfig
    index_name: ClassVar[str] = "answer"

    def __init__(self, config: TemplateConfig, seed: int = 0):
        super().__init__(config, seed)
        self.templates = config.template_list()
        fixed = sorted({c for t, _ in self.templates for c in t if c.islower()})
        self.train_names = [f"s{i}" for i in range(config.train_symbols)]
        self.valid_names = [f"v{i}" for i in range(config.valid_symbols)]
        self.test_names = [f"t{i}" for i in range(config.test_symbols)]
        self.vocab = Vocab([PAD, CLS, *fixed, *self.train_names, *self.valid_names, *self.test_names])
        self.copy = self.templates[0][1].isalpha()
        self.num_classes = len(self.vocab) if self.copy else 1 + max(int(y) for _, y in self.templates)
        self.num_indices = 1
        self.length = len(self.templates[0][0])
        self.seq_len = self.length + 1
        # per template: the wildcard index at every position (-1: a fixed token) and its fixed ids
        self.n_wild = max(len(set(filter(str.isupper, t))) for t, _ in self.templates)
        slots = np.full((len(self.templates), self.length), -1, dtype=np.int64)
        fixed_ids = np.zeros_like(slots)
        labels = np.zeros(len(self.templates), dtype=np.int64)
        for i, (t, y) in enumerate(self.templates):
            c = canonical(t)
            for p, ch in enumerate(c):
                if ch.isupper():
                    slots[i, p] = ord(ch) - 65
                else:
                    fixed_ids[i, p] = self.vocab[ch]
            labels[i] = ord(canonical(t + y)[-1]) - 65 if self.copy else int(y)  # copy: the label's wildcard index
        self.slots, self.fixed_ids, self.labels = slots, fixed_ids, labels

    def class_names(self) -> list[str]:
        return list(self.vocab.tokens) if self.copy else [str(i) for i in range(self.num_classes)]

    def default_sizes(self) -> dict[str, int]:
        return {"train_size": self.config.train_symbols, "test_size": 1000, "n_tr": 0}

    def symbol_range(self, split: str) -> tuple[int, int]:
        """(first id, count) of the alphabet ``split`` draws from: three disjoint alphabets, for
        "train", "valid", and every other split (test)."""
        if split == "train":
            return self.vocab[self.train_names[0]], len(self.train_names)
        if split == "valid":
            return self.vocab[self.valid_names[0]], len(self.valid_names)
        return self.vocab[self.test_names[0]], len(self.test_names)

    def sample(self, split: str, indices) -> Batch:
        indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        B = len(indices)
        u32 = random_u32(random_words(self.seed, split, indices, (self.n_wild + 2) // 2))
        which = uniform_ints(u32[:, 0], len(self.templates))
        first, count = self.symbol_range(split)
        symbols = first + distinct_draws(u32[:, 1:1 + self.n_wild], count)        # (B, wildcards)
        slots = self.slots[which]
        filled = np.take_along_axis(symbols, np.clip(slots, 0, None), 1)
        tokens = np.empty((B, self.seq_len), dtype=TOKEN_DTYPE)
        tokens[:, :-1] = np.where(slots >= 0, filled, self.fixed_ids[which])
        tokens[:, -1] = self.vocab[CLS]
        label = self.labels[which]
        targets = np.take_along_axis(symbols, label[:, None], 1)[:, 0] if self.copy else label
        small = np.int32 if self.copy else np.int16
        return Batch(tokens, np.full((B, 1), self.length, dtype=np.int16), targets[:, None].astype(small),
                     np.zeros((B, 1), dtype=np.int16), {"template": which.astype(np.int16)[:, None]})

    def token_roles(self) -> dict[str, list[int]]:
        first = self.vocab[self.train_names[0]]
        return {"query": list(range(first, len(self.vocab))), "special": [self.vocab[CLS]]}

    def format_example(self, batch: Batch, i: int, notation: str | None = None) -> str:
        if notation is not None:
            raise ConfigError(f"--notation: task {self.name!r} has one text form")
        words = self.vocab.decode(batch.tokens[i][:-1])
        template = self.templates[int(batch.meta["template"][i, 0])][0]
        return f"{' '.join(words)}\t{template}:{self.class_names()[int(batch.targets[i, 0])]}"

    def describe_example(self, batch: Batch, i: int, notation: str | None = None) -> dict:
        words = self.vocab.decode(batch.tokens[i][:-1])
        template = self.templates[int(batch.meta["template"][i, 0])][0]
        return {"symbols": words, "template": template, "label": self.class_names()[int(batch.targets[i, 0])],
                "tokens": batch.tokens[i].tolist(), "positions": [self.length], "index": [0]}

    def solve_text(self, line: str, verbose: bool = False) -> str:
        """Which template a line of symbols fits (the independent evaluator: equality patterns)."""
        from ..errors import ParseError

        words = line.split()
        if len(words) != self.length:
            raise ParseError(f"expected {self.length} symbols (this task's templates are {self.length} long), "
                             f"got {len(words)}: {line.strip()[:40]!r}")
        fits = [(t, y) for t, y in self.templates if fits_template(words, t)]
        if not fits:
            raise ParseError(f"{line.strip()[:40]!r} fits none of the templates {', '.join(t for t, _ in self.templates)}")
        t, y = fits[0]
        answer = words[t.index(y)] if self.copy else y
        return f"{' '.join(words)}\t{t}:{answer}" if not verbose else f"template {t}, label {answer}"


def fits_template(words: list[str], template: str) -> bool:
    """Whether ``words`` fill ``template``: fixed tokens match, equal wildcards hold equal symbols,
    distinct wildcards distinct symbols."""
    if len(words) != len(template):
        return False
    fill: dict[str, str] = {}
    for w, c in zip(words, template):
        if c.islower():
            if w != c:
                return False
        elif fill.setdefault(c, w) != w:
            return False
    return len(set(fill.values())) == len(fill)
