import itertools

import numpy as np
import pytest

from legolab.errors import ConfigError
from legolab.groups import get_group, group_from_table


@pytest.mark.parametrize("spec,order", [("sign", 2), ("z2", 2), ("d3", 6), ("z5", 5), ("d4", 8), ("s3", 6), ("s4", 24)])
def test_builtin_groups_satisfy_the_axioms(spec, order):
    g = get_group(spec)
    assert g.order == order
    k = np.arange(order)
    assert (g.table[0] == k).all() and (g.table[:, 0] == k).all()          # identity is element 0
    assert (g.table[k, g.inverse] == 0).all()                                # inverses
    assert all(sorted(row) == list(k) for row in g.table)                    # latin square (closure, cancellation)
    assert (g.table[g.table, :] == g.table[:, g.table]).all()                # associativity
    # a user table built from the printed table gives back the same group
    again = group_from_table(list(g.names), [[g.names[x] for x in row] for row in g.table])
    assert (again.table == g.table).all()


def test_d3_is_non_abelian_and_matches_the_dihedral_relations():
    g = get_group("d3")
    r, s = g.index("R"), g.index("S")
    assert g.mul(r, s) != g.mul(s, r)
    assert g.mul(r, s) == g.index("SR2")                     # r s = s r^-1
    assert g.mul(g.mul(r, r), r) == 0 and g.mul(s, s) == 0


def test_user_table_identity_is_moved_to_index_zero():
    names = ["A", "B", "C"]
    # Z3 with identity B
    table = [["C", "A", "B"], ["A", "B", "C"], ["B", "C", "A"]]
    g = group_from_table(names, table)
    assert g.names[0] == "B"
    assert (g.table[g.table, :] == g.table[:, g.table]).all()


@pytest.mark.parametrize("names,table,message", [
    (["A", "B"], [["A", "B"], ["B", "X"]], "not closed"),
    (["A", "B"], [["A", "B"]], "must be 2 x 2"),
    (["A", "B"], [["B", "B"], ["B", "B"]], "no identity"),
    (["A", "B", "C"], [["A", "B", "C"], ["B", "B", "B"], ["C", "A", "C"]], "has no inverse"),
    (["A", "A"], [["A", "A"], ["A", "A"]], "not unique"),
    (["x", "B"], [["x", "B"], ["B", "x"]], "looks like a variable"),
    (["A", "1"], [["A", "1"], ["1", "A"]], "not '1'"),
])
def test_invalid_tables_are_refused_with_the_reason(names, table, message):
    with pytest.raises(ConfigError, match=message):
        group_from_table(names, table)


def test_non_associative_latin_square_is_refused():
    # A loop with identity and inverses that is not associative (order 5).
    table = [[0, 1, 2, 3, 4], [1, 0, 3, 4, 2], [2, 4, 0, 1, 3], [3, 2, 4, 0, 1], [4, 3, 1, 2, 0]]
    names = ["E", "P", "Q", "R", "T"]
    with pytest.raises(ConfigError, match="not associative"):
        group_from_table(names, table)


def test_group_file_and_unknown_group(tmp_path):
    p = tmp_path / "z3.yaml"
    p.write_text("names: [E, A, B]\ntable: [[E, A, B], [A, B, E], [B, E, A]]\n")
    assert get_group(str(p)).order == 3
    with pytest.raises(ConfigError, match="unknown group"):
        get_group("q8")
    with pytest.raises(ConfigError, match="cannot parse"):
        (tmp_path / "bad.json").write_text("{")
        get_group(str(tmp_path / "bad.json"))


def test_symmetric_group_names_are_one_line_permutations():
    g = get_group("s3")
    assert g.names[0] == "[123]"
    assert set(g.names) == {"[" + "".join(p) + "]" for p in itertools.permutations("123")}
