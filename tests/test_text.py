import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from legolab.errors import ParseError
from legolab.groups import get_group
from legolab.tasks import LegoConfig, LegoTask
from legolab.tasks.lego_text import Clause, format_sentence, parse_sentence, solve


@settings(max_examples=300, deadline=None)
@given(group=st.sampled_from(["sign", "d3", "z7", "s3", "d5"]), n=st.integers(1, 30), seed=st.integers(0, 2**31),
       index=st.integers(0, 10**9))
def test_parse_of_print_is_identity(group, n, seed, index):
    task = LegoTask(LegoConfig(group=group, n=n, n_vars=max(26, n)), seed=seed)
    clauses = task.clauses(task.sample("test", [index]).tokens[0])
    assert parse_sentence(format_sentence(clauses), task.group) == clauses
    if group == "sign":
        assert parse_sentence(format_sentence(clauses, "code"), task.group) == clauses


@settings(max_examples=200, deadline=None)
@given(clauses=st.lists(st.tuples(st.sampled_from(["a", "b", "x1", "foo"]), st.sampled_from(["E", "R", "R2", "S", "SR", "SR2"]),
                                  st.sampled_from(["1", "a", "b", "x1", "foo"])), min_size=1, max_size=6),
       spaces=st.booleans())
def test_parse_of_print_on_arbitrary_clauses(clauses, spaces):
    g = get_group("d3")
    cs = [Clause(*c) for c in clauses]
    text = format_sentence(cs)
    if spaces:
        text = text.replace("=", " = ").replace(";", " ; ")
    assert parse_sentence(text, g) == cs


def test_notations_and_separators():
    g = get_group("sign")
    expect = [Clause("a", "+", "1"), Clause("b", "-", "a"), Clause("c", "+", "b")]
    for text in ["a=+1; b=-a; c=+b", "a=+1;b=-a;c=+b;", " a = + 1 , b = - a , c = + b ,", "a = val 1 , b = not a , c = val b ,"]:
        assert parse_sentence(text, g) == expect
    assert solve(expect, g) == [("a", 0), ("b", 1), ("c", 1)]
    assert parse_sentence("a = val 0 , b = not a ,", g)[0] == Clause("a", "-", "1")
    # D3 without spaces between element and variable; non-abelian products in the right order
    d3 = get_group("d3")
    chain = solve(parse_sentence("b=SR a; a=R2 1; c=R b", d3), d3)
    a = d3.index("R2")
    b = d3.mul(d3.index("SR"), a)
    assert chain == [("a", a), ("b", b), ("c", d3.mul(d3.index("R"), b))]


@pytest.mark.parametrize("text,message", [
    ("", "empty sentence"),
    (" ; ;", "empty sentence"),
    ("a=+1; b=*a", r"clause 2 'b=\*a': unknown group element"),
    ("a=+1; b=-a; a=+b", "clause 3 'a=\\+b': variable 'a' is assigned twice"),
    ("a=+1; b=-c", "clause 2 'b=-c': variable 'c' is used but never assigned"),
    ("a=+1; c=-b; b=+c", "cycle"),
    ("a=+a", "no root"),
    ("b=-a; a=+b; c=+1; d=-c", "clause 1 .b=-a.: cycle b <- a <- b is not connected to the root"),
    ("a=+b; b=-a", "no root"),
    ("a=+1; b=-1", "two roots: clauses 1 and 2"),
    ("a=+1; b=-a; c=+a", "clause 3 'c=\\+a': variable 'a' is also used in clause 2"),
    ("a+1", "clause 1 'a\\+1': expected exactly one '='"),
    ("a==+1", "exactly one '='"),
    ("=+1", "missing variable"),
    ("a=", "missing right-hand side"),
    ("a=+", "missing operand"),
    ("a=+1; B=-a", "unknown token 'B'"),
    ("a=+1; b=-$", "unknown token '\\$'"),
    ("a = val 1 , b = maybe a ,", "val\\|not"),
])
def test_malformed_sentences_name_the_clause_and_reason(text, message):
    g = get_group("sign")
    with pytest.raises(ParseError, match=message):
        solve(parse_sentence(text, g), g)


def test_code_notation_is_sign_group_only():
    with pytest.raises(ParseError, match="only defined for the sign group"):
        parse_sentence("a = val 1 ,", get_group("d3"))
    with pytest.raises(ParseError, match="unknown group element"):
        parse_sentence("a=+1", get_group("d3"))
