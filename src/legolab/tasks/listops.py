"""ListOps (Nangia & Bowman 2018) with the Long Range Arena's tree distribution (Tay et al. 2021),
and a read-out at every operator node (step-level evaluation, as in Verbose ListOps).

An expression is a tree of operators over the digits 0..9, in prefix form, brackets kept as tokens:

    [BOS] [MAX 2 9 [MIN 4 7 ] 0 ] [EOS]        MIN -> 4 (height 1), MAX -> 9 (height 2, the root)

Operators: MIN, MAX, MED (``int(np.median)``: the floor of the mean of the two middle values for an
even count), SM (sum modulo ``modulus``). Every operator node is a read-out, read at its closing
``]`` (the first token by which all of its arguments have been seen), step = its height - 1 (an
operator over values only is step 0; the root has the largest height of its tree). Read-outs are
listed in the order of their ``]`` (post-order, the order of evaluation).

Trees (LRA's ``generate_tree``, the root at depth 0): a node at depth < max_depth is an operator
with probability 1/4, else a value; at depth max_depth always a value; an operator takes 2..max_args
arguments (uniform) and an operator uniform over ``operators``. Length = tokens of the expression
(operator tokens, values and ``]``; not BOS/EOS), which is LRA's length; a tree is kept iff
min_length <= length <= max_length (inclusive), otherwise it is redrawn. LRA's max_depth counts
the root as depth 1 and its window is strict, so its (10, 500 < length < 2000) is our lra preset
(9, 501..1999). Unlike LRA there is no deduplication (examples are independent draws) and no
parentheses. A root that is a value has length 1 and is always rejected (min_length >= 4), so the
root is drawn as an operator directly: the same distribution, fewer wasted draws.
"""

from __future__ import annotations

import dataclasses
import re
import statistics
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from ..errors import ConfigError, ParseError
from . import register_task
from .base import BLOCK, BOS, EOS, PAD, TOKEN_DTYPE, Batch, Task, Vocab, random_words, uniform_ints

OPERATORS = ("MIN", "MAX", "MED", "SM")
CLOSE = "]"
DIGITS = tuple(str(v) for v in range(10))
PRESETS = {
    "cpu": {"max_depth": 3, "max_args": 5, "min_length": 4, "max_length": 60},
    "lra": {"max_depth": 9, "max_args": 10, "min_length": 501, "max_length": 1999},  # LRA's 10, 500 < length < 2000
}
LIMITS = {"max_depth": (1, 64), "max_args": (2, 64), "min_length": (4, 16_384), "max_length": (4, 16_384)}
MIN_EXPRESSION = 4              # [OP a b ]: the shortest expression
MAX_TRIES = 10_000              # redraws of one example before the length window counts as unreachable
_WORDS_PER_CHUNK = 1 << 22      # random words in memory at once (32 MiB)
_LOW32 = np.uint64(0xFFFFFFFF)


@dataclass
class ListOpsConfig:
    preset: str = "cpu"             # cpu (depth 3, 2..5 args, 4..60 tokens) | lra (LRA's distribution)
    max_depth: int | None = None    # operator levels (root at depth 0); None: the preset's
    max_args: int | None = None     # arguments per operator: uniform in 2..max_args; None: the preset's
    min_length: int | None = None   # expression tokens, inclusive (BOS/EOS not counted); None: the preset's
    max_length: int | None = None   # expression tokens, inclusive; the sequence is max_length + 2
    operators: list[str] = OPERATORS  # the subset drawn from (a tuple default, so `legolab tasks` can show it)
    modulus: int = 10               # SM = sum % modulus

    def __post_init__(self):
        if isinstance(self.operators, tuple):  # a list, as a YAML file gives it (saved configs compare equal)
            self.operators = list(self.operators)

    def limits(self) -> dict[str, int]:
        """max_depth, max_args, min_length, max_length: the preset's values where unset."""
        preset = PRESETS.get(self.preset, PRESETS["cpu"])
        return {key: preset[key] if getattr(self, key) is None else getattr(self, key) for key in LIMITS}

    def validate(self) -> None:
        if self.preset not in PRESETS:
            raise ConfigError(f"task.preset: must be one of {', '.join(PRESETS)}, got {self.preset!r}")
        values = self.limits()
        for key, (lo, hi) in LIMITS.items():
            v = values[key]
            if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
                raise ConfigError(f"task.{key}: must be an integer in {lo}..{hi} (or null: the preset's), got {getattr(self, key)!r}")
        D, A, lo, hi = values["max_depth"], values["max_args"], values["min_length"], values["max_length"]
        if lo > hi:
            raise ConfigError(f"task.min_length: must be at most max_length={hi}, got {lo}")
        longest = A ** D + 2 * (A ** D - 1) // (A - 1)  # the full A-ary tree of depth D
        if lo > longest:
            raise ConfigError(f"task.min_length: no tree with max_depth={D} and max_args={A} has {lo} tokens "
                              f"(the longest has {longest}), got {lo}")
        ops = self.operators
        if (not isinstance(ops, (list, tuple)) or not ops or any(o not in OPERATORS for o in ops)
                or len(set(ops)) != len(ops)):
            raise ConfigError(f"task.operators: must be a non-empty list of distinct operators from "
                              f"{', '.join(OPERATORS)} (such as [MAX, SM]), got {ops!r}")
        if not isinstance(self.modulus, int) or isinstance(self.modulus, bool) or not 2 <= self.modulus <= 1000:
            raise ConfigError(f"task.modulus: must be an integer in 2..1000, got {self.modulus!r}")


@register_task
class ListOpsTask(Task):
    """ListOps expressions (LRA trees, MIN MAX MED SM): every operator node's value, read at its closing bracket."""

    name: ClassVar[str] = "listops"
    config_class: ClassVar[type] = ListOpsConfig
    index_name: ClassVar[str] = "height"

    def __init__(self, config: ListOpsConfig, seed: int = 0):
        super().__init__(config, seed)
        limits = config.limits()
        self.max_depth, self.max_args = limits["max_depth"], limits["max_args"]
        self.min_length, self.max_length = limits["min_length"], limits["max_length"]
        # all four operators are always in the vocabulary: models of different subsets share ids
        self.vocab = Vocab([PAD, BOS, EOS, *(f"[{op}" for op in OPERATORS), CLOSE, *DIGITS])
        self.open0, self.close_id, self.digit0 = self.vocab["[MIN"], self.vocab[CLOSE], self.vocab["0"]
        self.op_codes = np.array([OPERATORS.index(op) for op in config.operators], dtype=np.int64)
        self.num_classes = max(10, config.modulus)
        # a height-h tree has >= 3h + 1 tokens (a chain of binary operators)
        self.num_indices = min(self.max_depth, (self.max_length - 1) // 3)
        self.seq_len = self.max_length + 2
        self.special_ids = (self.vocab[BOS], self.vocab[EOS])
        # every operator has >= 2 arguments, so a tree with k operators has >= 3k + 1 tokens
        self.max_nodes = min((self.max_length - 1) // 3, sum(self.max_args ** d for d in range(self.max_depth)))

    def default_sizes(self) -> dict[str, int]:
        """Fresh expressions every step (generation is cheap), LRA's 2,000 test expressions, every height supervised."""
        return {"train_size": 0, "test_size": 2000, "n_tr": 0}

    def token_roles(self) -> dict[str, list[int]]:
        return {"query": [self.vocab[d] for d in DIGITS], "special": list(self.special_ids)}

    def with_length(self, num_indices: int, seed: int | None = None) -> ListOpsTask:
        """Trees of at most ``num_indices`` operator levels (heights 1..num_indices) with the same
        operators, arguments and vocabulary: shallower for curricula, deeper to test extrapolation.
        A deeper variant's length window grows in proportion (a height-h tree needs >= 3h + 1
        tokens); a shallower one keeps it, its lower end cut to what such trees can reach."""
        D, A = self.max_depth, self.max_args
        max_length = max(self.max_length, -(-self.max_length * num_indices // D), 3 * num_indices + 1)
        longest = A ** num_indices + 2 * (A ** num_indices - 1) // (A - 1)
        config = dataclasses.replace(self.config, max_depth=num_indices, max_length=min(max_length, LIMITS["max_length"][1]),
                                     min_length=min(self.min_length, longest))
        return ListOpsTask(config, seed=self.seed if seed is None else seed)

    # ---- generation -----------------------------------------------------------------------
    def sample(self, split: str, indices) -> Batch:
        """Examples ``indices`` of ``split``. Try r of example i reads one 64-bit word per tree node
        (in breadth-first order) from row i of the stream (seed, ``split/r``); example i is its first
        try inside the length window, so it depends only on (config, seed, split, i)."""
        indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        B, P = len(indices), self.max_nodes
        small = np.int16  # positions < 16,386, classes <= 1000, heights <= 64
        out = Batch(np.zeros((B, self.seq_len), dtype=TOKEN_DTYPE), np.zeros((B, P), dtype=small),
                    np.zeros((B, P), dtype=small), np.full((B, P), -1, dtype=small),
                    {"root": np.zeros((B, P), dtype=bool), "depth": np.full((B, P), -1, dtype=small),
                     "open": np.zeros((B, P), dtype=small)})
        if not B:
            return out
        # chunks of whole random blocks, so memory stays bounded for long expressions
        blocks = indices // BLOCK
        order = np.argsort(blocks, kind="stable")
        _, first = np.unique(blocks[order], return_index=True)
        per_chunk = max(1, _WORDS_PER_CHUNK // (BLOCK * self.max_length))
        bounds = [*first[::per_chunk].tolist(), B]
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            rows = order[lo:hi]
            for attempt in range(MAX_TRIES):
                if not len(rows):
                    break
                words = random_words(self.seed, f"{split}/{attempt}", indices[rows], self.max_length)
                rows = rows[~self._draw(words, rows, out)]
            else:
                raise ConfigError(f"task.min_length: no expression of {self.min_length}..{self.max_length} tokens in "
                                  f"{MAX_TRIES} draws (example {int(indices[rows[0]])}); widen the length window")
        return out

    def _draw(self, words: np.ndarray, rows: np.ndarray, out: Batch) -> np.ndarray:
        """One try for each row of ``words``; writes the accepted ones to ``out[rows]`` and says which."""
        n, L, D, A = len(words), self.max_length, self.max_depth, self.max_args
        # top-down, level by level: flat arrays of this level's nodes, grouped by example, in
        # breadth-first order; node k of an example reads words[:, k]
        ex, slot = np.arange(n), np.zeros(n, dtype=np.int64)
        count = np.ones(n, dtype=np.int64)  # nodes so far per example
        alive = np.ones(n, dtype=bool)      # False once an example has more nodes than max_length allows
        levels = []
        for d in range(D + 1):
            w = words[ex, slot]
            coin, low = w >> np.uint64(32), w & _LOW32
            # operator with probability 1/4 (coin < 2^30); its remaining 30 bits choose the operator
            is_op = np.full(len(ex), d == 0) if d == 0 or d == D else coin < np.uint64(1 << 30)
            arity = np.where(is_op, 2 + uniform_ints(low, A - 1), 0)
            op = self.op_codes[uniform_ints((coin & np.uint64(0x3FFFFFFF)) << np.uint64(2), len(self.op_codes))]
            levels.append((ex, is_op, arity, np.where(is_op, op, uniform_ints(low, 10))))
            if d == D or not is_op.any():
                break
            child_ex = np.repeat(ex, arity)
            per = np.bincount(child_ex, minlength=n)
            first = np.cumsum(per) - per
            child_slot = count[child_ex] + np.arange(len(child_ex)) - first[child_ex]
            count += per
            alive &= count <= L  # more nodes than tokens allowed: rejected, stop growing it
            keep = alive[child_ex]
            ex, slot = child_ex[keep], child_slot[keep]
        levels = [tuple(a[alive[lv[0]]] for a in lv) for lv in levels]  # drop every node of a rejected example
        while levels and not len(levels[-1][0]):  # a last level that held only rejected examples' nodes
            levels.pop()
        if not levels:
            return alive

        # bottom-up: tokens, height and value of every node
        sizes, heights, values, starts_of = [None] * len(levels), [None] * len(levels), [None] * len(levels), [None] * len(levels)
        K = self.num_classes
        for d in range(len(levels) - 1, -1, -1):
            ex_d, is_op, arity, payload = levels[d]
            size, height, value = np.ones(len(ex_d), np.int64), np.zeros(len(ex_d), np.int64), payload.copy()
            if d + 1 < len(levels) and len(levels[d + 1][0]):
                ar = arity[is_op]
                starts = np.cumsum(ar) - ar  # each operator's first argument in the next level
                starts_of[d] = starts
                size[is_op] = 2 + np.add.reduceat(sizes[d + 1], starts)
                height[is_op] = 1 + np.maximum.reduceat(heights[d + 1], starts)
                child = values[d + 1]
                seg = np.repeat(np.arange(len(ar)), ar) * K
                ordered = np.sort(seg + child) - seg  # each operator's arguments, sorted
                med = (ordered[starts + (ar - 1) // 2] + ordered[starts + ar // 2]) // 2
                by_op = np.stack([ordered[starts], ordered[starts + ar - 1], med,
                                  np.add.reduceat(child, starts) % self.config.modulus])
                value[is_op] = by_op[payload[is_op], np.arange(len(ar))]
            sizes[d], heights[d], values[d] = size, height, value

        length = np.zeros(n, np.int64)
        length[levels[0][0]] = sizes[0]
        ok = alive & (length >= self.min_length) & (length <= L)

        # top-down again: each node's first token (the root's after BOS), for accepted examples
        row_of = np.full(n, -1)
        row_of[ok] = rows[ok]
        tokens = out.tokens
        acc = row_of[ok]
        tokens[acc] = 0
        tokens[acc, 0] = self.vocab[BOS]
        tokens[acc, 1 + length[ok]] = self.vocab[EOS]
        start = np.ones(len(levels[0][0]), np.int64)
        read = []  # per level: (row, close, value, step, depth, open) of the operator nodes of accepted examples
        for d, (ex_d, is_op, arity, payload) in enumerate(levels):
            row = row_of[ex_d]
            keep = row >= 0
            tokens[row[keep], start[keep]] = np.where(is_op, self.open0 + payload, self.digit0 + values[d])[keep]
            close = start + sizes[d] - 1
            opk = is_op & keep
            tokens[row[opk], close[opk]] = self.close_id
            read.append((row[opk], close[opk], values[d][opk], heights[d][opk] - 1, np.full(int(opk.sum()), d), start[opk]))
            if starts_of[d] is not None:
                ar = arity[is_op]
                child_size = sizes[d + 1]
                before = np.cumsum(child_size) - child_size
                within = before - np.repeat(before[starts_of[d]], ar)
                start = np.repeat(start[is_op], ar) + 1 + within

        row, close, value, step, depth, open_ = (np.concatenate(a) for a in zip(*read))
        order = np.lexsort((close, row))  # by example, then by the position of ``]``
        row, close, value, step, depth, open_ = (a[order] for a in (row, close, value, step, depth, open_))
        col = np.arange(len(row)) - np.searchsorted(row, row)
        out.positions[acc], out.targets[acc], out.index[acc] = 0, 0, -1
        out.meta["root"][acc], out.meta["depth"][acc], out.meta["open"][acc] = False, -1, 0
        out.positions[row, col], out.targets[row, col], out.index[row, col] = close, value, step
        out.meta["root"][row, col], out.meta["depth"][row, col], out.meta["open"][row, col] = depth == 0, depth, open_
        return ok

    # ---- text -----------------------------------------------------------------------------
    def _nodes(self, batch: Batch, i: int) -> list[dict]:
        valid = batch.index[i] >= 0
        ops = self.vocab.decode(batch.tokens[i][batch.meta["open"][i][valid]])
        return [{"op": op[1:], "value": int(v), "height": int(s) + 1, "depth": int(d), "open": int(o), "close": int(p)}
                for op, v, s, d, o, p in zip(ops, batch.targets[i][valid], batch.index[i][valid], batch.meta["depth"][i][valid],
                                             batch.meta["open"][i][valid], batch.positions[i][valid])]

    def format_example(self, batch: Batch, i: int, notation: str | None = None) -> str:
        """``[MAX 2 9 [MIN 4 7 ] 0 ]<TAB>9 | MIN:4 MAX:9``: the root's value, then every operator's
        value in the order of its ``]``."""
        if notation is not None:
            raise ConfigError(f"--notation: task {self.name!r} has one text form")
        text = " ".join(t for t in self.vocab.decode(batch.tokens[i]) if t not in (PAD, BOS, EOS))
        nodes = self._nodes(batch, i)
        return _answer_line(text, nodes)

    def describe_example(self, batch: Batch, i: int, notation: str | None = None) -> dict:
        nodes = self._nodes(batch, i)
        valid = batch.index[i] >= 0
        return {"text": self.format_example(batch, i, notation).split("\t")[0],
                "value": next(n["value"] for n in nodes if n["depth"] == 0), "nodes": nodes,
                "positions": batch.positions[i][valid].tolist(), "index": batch.index[i][valid].tolist(),
                "targets": batch.targets[i][valid].tolist(), "tokens": batch.tokens[i].tolist()}

    def solve_text(self, line: str, verbose: bool = False) -> str:
        """Parse an expression and evaluate it recursively (independently of the generator). Verbose:
        one line per operator node, in the order of its ``]``, with its tokens (indices into the
        expression), depth, height and value."""
        tokens = tokenize(line)
        root = parse(tokens)
        nodes = []
        evaluate(root, self.config.modulus, nodes)
        if not verbose:
            return _answer_line(" ".join(tokens), nodes)
        lines = [f"{'node':>4s}  {'op':3s}  {'tokens':>9s}  {'depth':>5s}  {'height':>6s}  value"]
        for k, n in enumerate(nodes):
            span = f"{n['open']}..{n['close']}"
            root = "  (the root: the answer)" if n["depth"] == 0 else ""
            lines.append(f"{k:4d}  {n['op']:3s}  {span:>9s}  {n['depth']:5d}  {n['height']:6d}  {n['value']}{root}")
        return "\n".join(lines)


def _answer_line(text: str, nodes: list[dict]) -> str:
    root = next(n["value"] for n in nodes if n["depth"] == 0)
    return f"{text}\t{root} | " + " ".join(f"{n['op']}:{n['value']}" for n in nodes)


# ---- an independent parser and evaluator (solve_text, and the tests' check of the labels) -------
_TOKEN = re.compile(r"\[[^\s\[\]]*|\]|[^\s\[\]]+")
MAX_NESTING = 500  # keeps the recursive evaluator far from Python's recursion limit


def _show(token: str) -> str:
    return repr(token if len(token) <= 20 else token[:20] + "...")


@dataclass
class Node:
    op: str
    open: int                       # token index of ``[OP``
    depth: int
    args: list = field(default_factory=list)  # ints and Nodes
    close: int = -1                 # token index of ``]``


def tokenize(line: str) -> list[str]:
    """Tokens of an expression: ``[OP``, ``]`` and values (``9]`` is two tokens)."""
    return _TOKEN.findall(line)


def parse(tokens: list[str]) -> Node:
    """The tree of an expression; ParseError names the token index and the reason."""
    if not tokens:
        raise ParseError("token 0: empty expression; expected an operator such as [MAX")
    stack: list[Node] = []
    root = None
    for k, tok in enumerate(tokens):
        if root is not None and not stack:
            raise ParseError(f"token {k}: trailing {_show(tok)} after the complete expression (tokens 0..{k - 1})")
        if tok.startswith("["):
            if tok[1:] not in OPERATORS:
                raise ParseError(f"token {k}: unknown operator {_show(tok)} (known: {' '.join('[' + o for o in OPERATORS)})")
            if len(stack) >= MAX_NESTING:
                raise ParseError(f"token {k}: nested deeper than {MAX_NESTING} operators")
            node = Node(tok[1:], k, len(stack))
            if stack:
                stack[-1].args.append(node)
            else:
                root = node
            stack.append(node)
        elif tok == CLOSE:
            if not stack:
                raise ParseError(f"token {k}: ']' closes nothing")
            node = stack.pop()
            if not node.args:
                raise ParseError(f"token {k}: [{node.op} (token {node.open}) has no arguments")
            node.close = k
        elif re.fullmatch(r"-?\d+", tok):
            if tok not in DIGITS:
                raise ParseError(f"token {k}: value {_show(tok)} out of range (values are the digits 0..9)")
            if not stack:
                raise ParseError(f"token {k}: a value outside any operator; an expression starts with an operator such as [MAX")
            stack[-1].args.append(int(tok))
        else:
            raise ParseError(f"token {k}: {_show(tok)} is not a ListOps token (operators [MIN [MAX [MED [SM, ], values 0..9)")
    if stack:
        raise ParseError(f"token {len(tokens)}: end of input inside [{stack[-1].op} (token {stack[-1].open}): missing ']'")
    return root


def evaluate(node: Node, modulus: int = 10, record: list | None = None) -> tuple[int, int]:
    """(value, height) of ``node``, recursively; appends every operator node to ``record`` in post-order."""
    values, height = [], 1
    for a in node.args:
        if isinstance(a, Node):
            v, h = evaluate(a, modulus, record)
            height = max(height, h + 1)
        else:
            v = a
        values.append(v)
    if node.op == "MIN":
        value = min(values)
    elif node.op == "MAX":
        value = max(values)
    elif node.op == "MED":
        value = int(statistics.median(values))  # the mean of the two middle values, floored (LRA's int(np.median))
    else:
        value = sum(values) % modulus
    if record is not None:
        record.append({"op": node.op, "value": value, "height": height, "depth": node.depth, "open": node.open,
                       "close": node.close})
    return value, height
