"""LEGO sentences as text: printing, parsing and an independent solver.

Two notations are read:
  paper:  ``a=+1; b=-a; c=+b``  (``;`` or ``,`` between clauses, whitespace optional, any group's
          element names; variables are lowercase; ``b=R2 a`` and ``b=R2a`` both read)
  code:   ``a = val 1 , b = not a ,``  (the paper's public code: ``val`` is +, ``not`` is -,
          values 1/0 for +1/-1; sign group only)

The solver walks the chain from the root and is written separately from the generator, so the
two check each other.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import ParseError
from ..groups import ROOT_TOKEN, VARIABLE_NAME, Group

_CODE_OPS = {"val": "+", "not": "-"}


@dataclass(frozen=True)
class Clause:
    """``lhs = op operand``: operand is a variable name or the root token ``1``."""

    lhs: str
    op: str
    operand: str


def format_clause(c: Clause, style: str = "paper", group: Group | None = None) -> str:
    if style == "code":
        if c.operand == ROOT_TOKEN:
            return f"{c.lhs} = val {1 if c.op == '+' else 0}"
        return f"{c.lhs} = {'val' if c.op == '+' else 'not'} {c.operand}"
    # A space keeps "r2 a" from reading as "r2a"; "+a" and "-1" need none.
    gap = " " if c.op[-1].isalnum() else ""
    return f"{c.lhs}={c.op}{gap}{c.operand}"


def format_sentence(clauses: list[Clause], style: str = "paper") -> str:
    if style == "code":
        return " ".join(format_clause(c, "code") + " ," for c in clauses)
    return " ".join(format_clause(c) + ";" for c in clauses)


def _q(text: str, limit: int = 40) -> str:
    """A piece of the input, quoted and cut: an error line never echoes a huge input back."""
    text = text.strip()
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _clause_error(i: int, text: str, why: str) -> ParseError:
    return ParseError(f"clause {i + 1} {_q(text)}: {why}")


def _split_rhs(rhs: str, group: Group, i: int, text: str) -> tuple[str, str]:
    """Split ``op operand`` where the two may or may not be separated by whitespace."""
    parts = rhs.split()
    if len(parts) == 2:
        op, operand = parts
        if op not in group.names:
            raise _clause_error(i, text, f"unknown group element {_q(op)} ({group.name} has {', '.join(group.names)})")
        return op, operand
    if len(parts) != 1:
        raise _clause_error(i, text, "expected 'variable = element operand'")
    word = parts[0]
    splits = [(name, word[len(name):]) for name in group.names
              if word.startswith(name) and (word[len(name):] == ROOT_TOKEN or VARIABLE_NAME.match(word[len(name):]))]
    if len(splits) == 1:
        return splits[0]
    if len(splits) > 1:
        raise _clause_error(i, text, f"ambiguous right-hand side {_q(word)}: put a space between the element and the operand")
    # Say which half is wrong.
    for name in sorted(group.names, key=len, reverse=True):
        if word.startswith(name):
            rest = word[len(name):]
            raise _clause_error(i, text, f"unknown token {_q(rest)}: the operand must be a variable or {ROOT_TOKEN}" if rest
                                else "missing operand after the group element")
    raise _clause_error(i, text, f"unknown group element at the start of {_q(word)} ({group.name} has {', '.join(group.names)})")


def parse_sentence(text: str, group: Group) -> list[Clause]:
    """Parse a sentence in the paper's or the public code's notation into clauses."""
    pieces = [p for p in re.split(r"[;,]", text) if p.strip()]
    if not pieces:
        raise ParseError("empty sentence: expected clauses such as 'a=+1; b=-a'")
    code = any(w in _CODE_OPS for p in pieces for w in p.split())
    if code and group.names != ("+", "-"):
        raise ParseError("the code notation (val/not) is only defined for the sign group (Task 1)")
    clauses = []
    for i, piece in enumerate(pieces):
        if piece.count("=") != 1:
            raise _clause_error(i, piece, "expected exactly one '='")
        lhs, rhs = (s.strip() for s in piece.split("="))
        if not lhs:
            raise _clause_error(i, piece, "missing variable before '='")
        if not VARIABLE_NAME.match(lhs):
            raise _clause_error(i, piece, f"unknown token {_q(lhs)}: a variable name is lowercase letters, digits and _")
        if not rhs:
            raise _clause_error(i, piece, "missing right-hand side after '='")
        if code:
            words = rhs.split()
            if len(words) != 2 or words[0] not in _CODE_OPS:
                raise _clause_error(i, piece, "expected 'variable = val|not operand' in the code notation")
            op, operand = _CODE_OPS[words[0]], words[1]
            if operand in ("0", "1"):  # a constant: val 1 = +1, val 0 = -1, not flips it
                op = "+" if (operand == "1") == (op == "+") else "-"
                operand = ROOT_TOKEN
        else:
            op, operand = _split_rhs(rhs, group, i, piece)
        if operand != ROOT_TOKEN and not VARIABLE_NAME.match(operand):
            raise _clause_error(i, piece, f"unknown token {_q(operand)}: the operand must be a variable or {ROOT_TOKEN}")
        clauses.append(Clause(lhs, op, operand))
    return clauses


def solve(clauses: list[Clause], group: Group) -> list[tuple[str, int]]:
    """Walk the chain from the root; returns (variable, element index) in chain order.

    Raises ParseError naming the clause for every way a sentence can fail to be one chain.
    """
    if not clauses:
        raise ParseError("empty sentence: expected clauses such as 'a=+1; b=-a'")
    assigned: dict[str, int] = {}
    used_by: dict[str, int] = {}
    roots = []
    for i, c in enumerate(clauses):
        if c.op not in group.names:
            raise ParseError(f"clause {i + 1} {_q(format_clause(c))}: unknown group element {_q(c.op)}")
        if c.lhs in assigned:
            raise ParseError(f"clause {i + 1} {_q(format_clause(c))}: variable {_q(c.lhs)} is assigned twice "
                             f"(also in clause {assigned[c.lhs] + 1})")
        assigned[c.lhs] = i
    for i, c in enumerate(clauses):
        if c.operand == ROOT_TOKEN:
            roots.append(i)
        elif c.operand not in assigned:
            raise ParseError(f"clause {i + 1} {_q(format_clause(c))}: variable {_q(c.operand)} is used but never assigned")
        elif c.operand in used_by:
            j = used_by[c.operand]
            raise ParseError(f"clause {i + 1} {_q(format_clause(c))}: variable {_q(c.operand)} is also used in clause "
                             f"{j + 1}; a LEGO sentence is a single chain")
        else:
            used_by[c.operand] = i
    if not roots:
        raise ParseError(f"no root: no clause assigns from {ROOT_TOKEN} (such as 'a=+1'), so the chain has no start")
    if len(roots) > 1:
        raise ParseError(f"two roots: clauses {roots[0] + 1} and {roots[1] + 1} both assign from {ROOT_TOKEN}; "
                         "a LEGO sentence is a single chain")
    out, i, value = [], roots[0], 0
    while True:
        c = clauses[i]
        value = int(group.table[group.index(c.op), value])
        out.append((c.lhs, value))
        if c.lhs not in used_by:
            break
        i = used_by[c.lhs]
    if len(out) < len(clauses):
        # Every variable is assigned once and used at most once, so the rest form cycles.
        start = next(j for j, c in enumerate(clauses) if c.lhs not in {v for v, _ in out})
        cycle, j = [clauses[start].lhs], start
        while clauses[j].operand != clauses[start].lhs:
            j = assigned[clauses[j].operand]
            cycle.append(clauses[j].lhs)
        cycle.append(clauses[start].lhs)
        raise ParseError(f"clause {start + 1} {_q(format_clause(clauses[start]))}: cycle "
                         f"{_q(' <- '.join(cycle), 80)[1:-1]} is not connected to the root")
    return out
