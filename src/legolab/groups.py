"""Finite groups for LEGO clauses.

A group is a Cayley table over elements 0..k-1 with printable single-token names (never
lowercase words, which are variables). Element 0 is always the identity. LEGO uses the group's
left action on itself: a clause ``x = g y`` sets
``value(x) = g * value(y)``, and the root token ``1`` stands for the identity, so ``a = g 1``
gives ``value(a) = g``. Products follow function composition: ``(g * h)(p) = g(h(p))`` for
permutation groups.

Task 1 of the paper is the sign group {+, -} acting on {+1, -1}; Task 2 is the dihedral group
D3 of order 6.
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import ConfigError

ROOT_TOKEN = "1"
# Variables are lowercase names; group elements may not look like one.
VARIABLE_NAME = re.compile(r"[a-z_][a-z0-9_]*\Z")
# Characters that separate clauses or sides of a clause in the text format.
_RESERVED = set("=;,") | {" ", "\t", "\n"}


@dataclass(frozen=True, eq=False)
class Group:
    """A finite group given by its Cayley table; ``table[g, h]`` is the index of ``g * h``."""

    name: str
    names: tuple[str, ...]
    table: np.ndarray
    # How a variable's value is printed; the sign group prints +1/-1 rather than +/-.
    value_names: tuple[str, ...] = ()
    description: str = ""
    inverse: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        table = np.asarray(self.table, dtype=np.int64)
        table.setflags(write=False)
        object.__setattr__(self, "table", table)
        if not self.value_names:
            object.__setattr__(self, "value_names", self.names)
        inverse = np.argmax(table == 0, axis=1)
        inverse.setflags(write=False)
        object.__setattr__(self, "inverse", inverse)

    @property
    def order(self) -> int:
        return len(self.names)

    def mul(self, g, h):
        """Product ``g * h`` of element indices (arrays broadcast)."""
        return self.table[g, h]

    def index(self, name: str) -> int:
        return self.names.index(name)

    def __repr__(self) -> str:
        return f"Group({self.name!r}, order={self.order})"


def _permutation_group(name: str, perms: list[tuple[int, ...]], names: list[str], description: str) -> Group:
    """Group of permutations; ``perms[0]`` must be the identity. Product = composition g∘h."""
    index = {p: i for i, p in enumerate(perms)}
    table = np.empty((len(perms), len(perms)), dtype=np.int64)
    for i, g in enumerate(perms):
        for j, h in enumerate(perms):
            table[i, j] = index[tuple(g[h[x]] for x in range(len(h)))]
    return Group(name, tuple(names), table, description=description)


def sign_group() -> Group:
    """Task 1: {+, -} acting on {+1, -1} (isomorphic to Z2)."""
    return Group("sign", ("+", "-"), np.array([[0, 1], [1, 0]]), value_names=("+1", "-1"),
                 description="Task 1: + and - acting on {+1, -1} (Z2)")


def _rotation_name(i: int) -> str:
    return "E" if i == 0 else ("R" if i == 1 else f"R{i}")


def cyclic_group(k: int) -> Group:
    """Z_k as rotations E, R, R2, ..., R{k-1}."""
    if k < 2:
        raise ConfigError(f"cyclic group Z{k}: order must be at least 2")
    perms = [tuple((x + i) % k for x in range(k)) for i in range(k)]
    return _permutation_group(f"z{k}", perms, [_rotation_name(i) for i in range(k)], f"cyclic group of order {k}")


def dihedral_group(k: int) -> Group:
    """D_k of order 2k: elements S^a R^b named E, R, R2, ..., S, SR, SR2, ... (R rotates, S reflects)."""
    if k < 3:
        raise ConfigError(f"dihedral group D{k}: k must be at least 3")
    r = tuple((x + 1) % k for x in range(k))
    s = tuple((-x) % k for x in range(k))

    def power(p: tuple[int, ...], m: int) -> tuple[int, ...]:
        out = tuple(range(k))
        for _ in range(m):
            out = tuple(p[out[x]] for x in range(k))
        return out

    perms, names = [], []
    for a in range(2):
        for b in range(k):
            sa, rb = power(s, a), power(r, b)
            perms.append(tuple(sa[rb[x]] for x in range(k)))
            names.append(("S" if a else "") + ("" if b == 0 else ("R" if b == 1 else f"R{b}")) or "E")
    return _permutation_group(f"d{k}", perms, names, f"dihedral group of order {2 * k}" + (" (Task 2)" if k == 3 else ""))


def symmetric_group(k: int) -> Group:
    """S_k in one-line notation: [123] is the identity of S3, [213] swaps the first two points."""
    if not 2 <= k <= 6:
        raise ConfigError(f"symmetric group S{k}: k must be between 2 and 6")
    perms = list(itertools.permutations(range(k)))
    names = ["[" + "".join(str(p[x] + 1) for x in range(k)) + "]" for p in perms]
    return _permutation_group(f"s{k}", perms, names, f"symmetric group of order {len(perms)}")


def group_from_table(names: list[str], table: list[list], name: str = "custom") -> Group:
    """Validate a user's Cayley table (entries are element names or indices) and build the group.

    The identity is moved to index 0; everything else keeps its order.
    """
    k = len(names)
    if k < 2:
        raise ConfigError(f"group {name!r}: needs at least 2 elements, got {k}")
    for n in names:
        if not isinstance(n, str) or not n or any(c in _RESERVED for c in n) or n == ROOT_TOKEN:
            raise ConfigError(f"group {name!r}: element name {n!r} must be a non-empty token without spaces, '=', ';' or ',' and not '1'")
        if VARIABLE_NAME.match(n):
            raise ConfigError(f"group {name!r}: element name {n!r} looks like a variable; use uppercase letters, digits or symbols")
    if len(set(names)) != k:
        raise ConfigError(f"group {name!r}: element names are not unique")
    if len(table) != k or any(not isinstance(row, (list, tuple)) or len(row) != k for row in table):
        raise ConfigError(f"group {name!r}: the Cayley table must be {k} x {k}")
    lookup = {n: i for i, n in enumerate(names)}
    t = np.empty((k, k), dtype=np.int64)
    for i, row in enumerate(table):
        for j, entry in enumerate(row):
            if isinstance(entry, str) and entry in lookup:
                t[i, j] = lookup[entry]
            elif isinstance(entry, int) and not isinstance(entry, bool) and 0 <= entry < k:
                t[i, j] = entry
            else:
                raise ConfigError(f"group {name!r}: not closed: {names[i]} * {names[j]} = {entry!r} is not an element")
    ids = [e for e in range(k) if np.array_equal(t[e], np.arange(k)) and np.array_equal(t[:, e], np.arange(k))]
    if not ids:
        raise ConfigError(f"group {name!r}: no identity element (no row and column that leave every element unchanged)")
    e = ids[0]
    for g in range(k):
        if not np.any(t[g] == e) or not np.any(t[:, g] == e):
            raise ConfigError(f"group {name!r}: element {names[g]!r} has no inverse")
    # (g*h)*x == g*(h*x) for all g, h, x.
    left = t[t, :]                     # left[g, h, x] = (g*h)*x
    right = t[:, t]                    # right[g, h, x] = g*(h*x)
    bad = np.argwhere(left != right)
    if len(bad):
        g, h, x = bad[0]
        raise ConfigError(f"group {name!r}: not associative: ({names[g]}*{names[h]})*{names[x]} != {names[g]}*({names[h]}*{names[x]})")
    order = [e] + [i for i in range(k) if i != e]
    position = np.argsort(order)
    table_reordered = position[t[np.ix_(order, order)]]
    return Group(name, tuple(names[i] for i in order), table_reordered, description=f"group from a Cayley table ({k} elements)")


def load_group_file(path: str | Path) -> Group:
    """Read ``{"names": [...], "table": [[...], ...]}`` from a JSON or YAML file."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"group file {str(path)!r}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"group file {str(path)!r}: not a text file (expected JSON or YAML)") from None
    try:
        if path.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    except Exception as e:  # noqa: BLE001 - any parse failure is the user's file
        raise ConfigError(f"group file {str(path)!r}: cannot parse: {str(e).splitlines()[0]}") from None
    if not isinstance(data, dict) or "names" not in data or "table" not in data:
        raise ConfigError(f"group file {str(path)!r}: expected keys 'names' and 'table'")
    return group_from_table(list(data["names"]), list(data["table"]), name=data.get("name", path.stem))


GROUPS = {
    "sign": "Task 1: + and - acting on {+1, -1}",
    "z2": "alias of sign (Task 1)",
    "d3": "dihedral group of order 6 (Task 2)",
    "zK": "cyclic group of order K, e.g. z5",
    "dK": "dihedral group of order 2K, e.g. d4",
    "sK": "symmetric group on K points, e.g. s3 (K <= 6)",
    "PATH.json|.yaml": "a Cayley table: {names: [...], table: [[...]]}",
}


def get_group(spec: str) -> Group:
    """Resolve a group name (sign, z2, d3, z5, d4, s3, ...) or a Cayley-table file."""
    key = spec.strip().lower()
    if key in ("sign", "z2", "task1"):
        return sign_group()
    if key == "task2":
        return dihedral_group(3)
    m = re.fullmatch(r"([zds])(\d+)", key)
    if m:
        kind, k = m.group(1), int(m.group(2))
        return {"z": cyclic_group, "d": dihedral_group, "s": symmetric_group}[kind](k)
    if spec.endswith((".json", ".yaml", ".yml")):
        return load_group_file(spec)
    raise ConfigError(f"unknown group {spec!r}: expected sign, z2, d3, zK, dK, sK or a .json/.yaml Cayley table")
