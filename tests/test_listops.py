"""ListOps (tasks/listops.py): labels against an independent evaluator, the tree distribution, the
length window, per-index randomness, the text form and its errors, and a tiny model that learns."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

from legolab.cli import main
from legolab.errors import ConfigError, ParseError
from legolab.tasks import Batch, make_task, task_config
from legolab.tasks.listops import DIGITS, OPERATORS, Node, evaluate, parse, tokenize


def make(seed: int = 0, **values):
    return make_task("listops", task_config("listops", **values), seed=seed)


def expression(task, batch, i) -> list[str]:
    """The expression tokens of example i (between BOS and EOS)."""
    row = batch.tokens[i]
    return [task.vocab.tokens[t] for t in row[1:int((row != 0).sum()) - 1]]


def walk(node: Node):
    """Every operator node (with its arity) in pre-order."""
    yield node
    for a in node.args:
        if isinstance(a, Node):
            yield from walk(a)


@pytest.mark.slow
def test_every_node_value_agrees_with_the_independent_evaluator():
    """10^5 default-preset expressions: decode -> parse -> recursive evaluation; every operator's
    value, height, depth, read-out position (its ``]``) and the root flag."""
    task = make(seed=1)
    batch = task.sample("test", range(100_000))
    words = np.array(task.vocab.tokens, dtype=object)
    lengths = (batch.tokens != 0).sum(1)
    valid = batch.index >= 0
    for i in range(len(batch)):
        nodes = []
        evaluate(parse(list(words[batch.tokens[i, 1:lengths[i] - 1]])), task.config.modulus, nodes)
        v = valid[i]
        assert [n["value"] for n in nodes] == batch.targets[i][v].tolist()
        assert [n["height"] - 1 for n in nodes] == batch.index[i][v].tolist()
        assert [n["close"] + 1 for n in nodes] == batch.positions[i][v].tolist()  # +1: BOS
        assert [n["depth"] for n in nodes] == batch.meta["depth"][i][v].tolist()
        assert [n["depth"] == 0 for n in nodes] == batch.meta["root"][i][v].tolist()
    assert (batch.meta["root"].sum(1) == 1).all()
    assert set(np.unique(batch.index[valid])) == {0, 1, 2}


def test_the_median_rule_is_lras_int_np_median():
    rng = np.random.default_rng(0)
    for _ in range(2000):
        values = rng.integers(0, 10, rng.integers(1, 11)).tolist()
        root = parse(tokenize("[MED " + " ".join(map(str, values)) + " ]"))
        assert evaluate(root)[0] == int(np.median(values))
    assert evaluate(parse(tokenize("[MED 1 2 ]")))[0] == 1 and evaluate(parse(tokenize("[MED 3 8 ]")))[0] == 5
    assert evaluate(parse(tokenize("[SM 9 9 [MAX 1 8 ] ]")))[0] == 6
    assert evaluate(parse(tokenize("[SM 9 9 ]")), modulus=7)[0] == 4


def test_deterministic_and_per_index():
    a = make(seed=5).sample("train", range(10_000))
    b = make(seed=5).sample("train", range(10_000))
    for x, y in [(a.tokens, b.tokens), (a.positions, b.positions), (a.targets, b.targets), (a.index, b.index),
                 *((a.meta[k], b.meta[k]) for k in a.meta)]:
        assert x.tobytes() == y.tobytes()
    some = make(seed=5).sample("train", [5, 9000, 5, 1023, 1024])
    for x, y in [(some.tokens, a.tokens), (some.targets, a.targets), (some.positions, a.positions), (some.index, a.index)]:
        np.testing.assert_array_equal(x, y[[5, 9000, 5, 1023, 1024]])
    halves = [make(seed=5).sample("train", range(lo, lo + 5000)) for lo in (0, 5000)]
    np.testing.assert_array_equal(np.concatenate([h.tokens for h in halves]), a.tokens)
    assert not np.array_equal(make(seed=6).sample("train", range(100)).tokens, a.tokens[:100])
    assert not np.array_equal(make(seed=5).sample("test", range(100)).tokens, a.tokens[:100])


def test_small_batches_with_many_rejections():
    """A tight window rejects most trees, many by outgrowing max_length while they are drawn: small
    batches (later tries hold a few examples) give the rows of one large batch, with right labels."""
    task = make(max_length=12)
    whole = task.sample("train", range(4000))
    parts = Batch.concat([task.sample("train", range(lo, lo + 8)) for lo in range(0, 4000, 8)])
    for x, y in [(whole.tokens, parts.tokens), (whole.targets, parts.targets), (whole.positions, parts.positions),
                 (whole.index, parts.index), (whole.meta["depth"], parts.meta["depth"])]:
        np.testing.assert_array_equal(x, y)
    for i in range(500):
        nodes = []
        evaluate(parse(expression(task, whole, i)), 10, nodes)
        assert [n["value"] for n in nodes] == whole.targets[i][whole.index[i] >= 0].tolist()
    make(max_length=32, operators=["SM"]).sample("train", range(10176, 10240))  # once failed: a last level of rejected nodes


@pytest.mark.parametrize("values, reached", [
    ({}, (4, 54)),  # trees over 54 tokens are rare: 60 is the safety bound of the default
    ({"max_depth": 3, "max_args": 3, "min_length": 8, "max_length": 20}, (8, 20)),
    ({"max_depth": 5, "max_args": 2, "min_length": 10, "max_length": 30}, (10, 28)),  # binary: 3k + 1 tokens
])
def test_length_window_depth_and_arity(values, reached):
    task = make(**values)
    limits = task.config.limits()
    batch = task.sample("train", range(5000))
    lengths = (batch.tokens != 0).sum(1) - 2
    assert limits["min_length"] <= lengths.min() and lengths.max() <= limits["max_length"]
    assert (lengths.min(), lengths.max()) == reached  # bounds are inclusive (the second and third reach theirs)
    assert task.seq_len == limits["max_length"] + 2
    assert (batch.tokens[np.arange(5000), lengths + 1] == task.vocab["[EOS]"]).all()
    depths, arities = set(), set()
    for i in range(1000):
        for node in walk(parse(expression(task, batch, i))):
            depths.add(node.depth)
            arities.add(len(node.args))
    assert max(depths) == limits["max_depth"] - 1 and arities == set(range(2, limits["max_args"] + 1))
    assert batch.index.max() == task.num_indices - 1 == limits["max_depth"] - 1
    assert (batch.index >= 0).sum(1).max() <= task.max_nodes


def test_the_lra_preset():
    task = make(preset="lra")
    assert (task.max_depth, task.max_args, task.min_length, task.max_length, task.seq_len) == (9, 10, 501, 1999, 2001)
    batch = task.sample("test", range(40))
    lengths = (batch.tokens != 0).sum(1) - 2
    assert lengths.min() >= 501 and lengths.max() <= 1999
    for i in range(5):
        nodes = []
        evaluate(parse(expression(task, batch, i)), 10, nodes)
        assert [n["value"] for n in nodes] == batch.targets[i][batch.index[i] >= 0].tolist()
    assert make(preset="lra", max_length=3000).seq_len == 3002  # a preset's value can be overridden


def test_the_tree_distribution_is_lras():
    """Without rejection (max_length above the largest tree): the root's arity is uniform in
    2..max_args, an argument is an operator with probability 1/4, operators are uniform."""
    task = make(max_depth=2, max_args=5, max_length=40)  # the largest depth-2 tree has 37 tokens
    batch = task.sample("train", range(20_000))
    root_arity, child_ops, children, ops = np.zeros(6), 0, 0, dict.fromkeys(OPERATORS, 0)
    for i in range(len(batch)):
        root = parse(expression(task, batch, i))
        root_arity[len(root.args)] += 1
        children += len(root.args)
        child_ops += sum(isinstance(a, Node) for a in root.args)
        for node in walk(root):
            ops[node.op] += 1
    share = root_arity[2:] / len(batch)
    assert np.abs(share - 0.25).max() < 0.015, share
    assert abs(child_ops / children - 0.25) < 0.01, child_ops / children
    total = sum(ops.values())
    assert all(abs(k / total - 0.25) < 0.015 for k in ops.values()), ops


@pytest.mark.parametrize("operators", [["SM"], ["MAX", "MED"], ["MIN"]])
def test_operator_subsets(operators):
    task = make(operators=operators)
    batch = task.sample("train", range(3000))
    allowed = {0, *task.special_ids, task.vocab["]"], *(task.vocab[d] for d in DIGITS), *(task.vocab["[" + o] for o in operators)}
    assert set(np.unique(batch.tokens).tolist()) == allowed
    assert task.vocab.tokens == make().vocab.tokens  # one vocabulary for every subset


def test_modulus():
    for modulus in (7, 12):
        task = make(operators=["SM"], modulus=modulus)
        assert task.num_classes == max(10, modulus)
        batch = task.sample("train", range(3000))
        targets = batch.targets[batch.index >= 0]
        assert targets.max() == modulus - 1
        for i in range(200):
            nodes = []
            evaluate(parse(expression(task, batch, i)), modulus, nodes)
            assert [n["value"] for n in nodes] == batch.targets[i][batch.index[i] >= 0].tolist()


@pytest.mark.parametrize("text, message", [
    ("", r"^token 0: empty expression"),
    ("[MAX 2 9", r"^token 3: end of input inside \[MAX \(token 0\): missing '\]'"),
    ("[MAX 2 [MIN 1 3 ] 9", r"^token 7: end of input inside \[MAX \(token 0\)"),
    ("[MAX 2 9 ] ]", r"^token 4: trailing '\]' after the complete expression"),
    ("[MAX 2 9 ] 4", r"^token 4: trailing '4'"),
    ("] 2", r"^token 0: '\]' closes nothing"),
    ("[FOO 1 2 ]", r"^token 0: unknown operator '\[FOO'"),
    ("[MAX 1 [max 2 3 ] ]", r"^token 2: unknown operator '\[max'"),
    ("[MIN ]", r"^token 1: \[MIN \(token 0\) has no arguments"),
    ("[MAX 1 [SM ] ]", r"^token 3: \[SM \(token 2\) has no arguments"),
    ("[MAX 1 10 ]", r"^token 2: value '10' out of range"),
    ("[MAX 1 -3 ]", r"^token 2: value '-3' out of range"),
    ("[MAX 1 x ]", r"^token 2: 'x' is not a ListOps token"),
    ("7", r"^token 0: a value outside any operator"),
    ("[MAX 1 2 ] [MIN 3 4 ]", r"^token 4: trailing '\[MIN'"),
])
def test_parse_errors_name_the_place(text, message):
    task = make()
    with pytest.raises(ParseError, match=message) as info:
        task.solve_text(text)
    assert "\n" not in str(info.value)


def test_parse_errors_echo_little_input():
    task = make()
    for text in ("[MAX 1 " + "x" * 200 + " ]", "[" + "Q" * 200 + " 1 2 ]", "[MAX 1 " + "9" * 200 + " ]"):
        with pytest.raises(ParseError) as info:
            task.solve_text(text)
        assert len(str(info.value)) < 120 and str(info.value).count("x" * 21) == 0 and "Q" * 21 not in str(info.value)
    with pytest.raises(ParseError, match="nested deeper than 500"):
        task.solve_text("[MAX " * 600 + "1 2" + " ]" * 600)


def test_text_form():
    task = make()
    assert task.solve_text("[MAX 2 9 [MIN 4 7 ] 0 ]") == "[MAX 2 9 [MIN 4 7 ] 0 ]\t9 | MIN:4 MAX:9"
    assert task.solve_text("[MAX 2 9[MIN 4 7]0]") == "[MAX 2 9 [MIN 4 7 ] 0 ]\t9 | MIN:4 MAX:9"  # brackets split tokens
    verbose = task.solve_text("[MAX 2 9 [MIN 4 7 ] 0 ]", verbose=True).splitlines()
    assert verbose[1].split() == ["0", "MIN", "3..6", "1", "1", "4"]
    assert verbose[2].split()[:6] == ["1", "MAX", "0..8", "0", "2", "9"] and "root" in verbose[2]
    batch = task.sample("train", range(50))
    for i in range(50):
        line = task.format_example(batch, i)
        assert task.solve_text(line.split("\t")[0]) == line
        record = task.describe_example(batch, i)
        json.dumps(record)
        assert record["text"] == line.split("\t")[0] and int(line.split("\t")[1].split()[0]) == record["value"]
        assert [n["close"] for n in record["nodes"]] == record["positions"]
    with pytest.raises(ConfigError, match="one text form"):
        task.format_example(batch, 0, "code")


@pytest.mark.parametrize("values, message", [
    ({"preset": "huge"}, r"^task\.preset: must be one of cpu, lra"),
    ({"max_depth": 0}, r"^task\.max_depth: must be an integer in 1\.\.64"),
    ({"max_depth": "3"}, r"^task\.max_depth: must be an integer"),
    ({"max_args": 1}, r"^task\.max_args: must be an integer in 2\.\.64"),
    ({"min_length": 3}, r"^task\.min_length: must be an integer in 4\.\."),
    ({"max_length": 100_000}, r"^task\.max_length: must be an integer in 4\.\.16384"),
    ({"min_length": 80}, r"^task\.min_length: must be at most max_length=60"),
    ({"max_depth": 1, "min_length": 30, "max_length": 60}, r"^task\.min_length: no tree with max_depth=1 and max_args=5 has 30 tokens"),
    ({"operators": ["ADD"]}, r"^task\.operators: must be a non-empty list"),
    ({"operators": []}, r"^task\.operators"),
    ({"operators": ["MAX", "MAX"]}, r"^task\.operators"),
    ({"operators": "MAX"}, r"^task\.operators"),
    ({"modulus": 1}, r"^task\.modulus: must be an integer in 2\.\.1000"),
    ({"nonsense": 1}, r"^task\.nonsense: unknown key"),
])
def test_bad_configs_are_one_line(values, message):
    with pytest.raises(ConfigError, match=message) as info:
        task_config("listops", **values)
    assert "\n" not in str(info.value)


def test_cli_round_trip_and_errors(capsys, monkeypatch):
    for options in ([], ["max_depth=2", "operators=[SM]", "modulus=7"]):
        assert main(["generate", "--task", "listops", "--count", "300", *options]) == 0
        text = capsys.readouterr().out
        assert len(text.splitlines()) == 300
        monkeypatch.setattr("sys.stdin", io.StringIO(text))
        assert main(["solve", "--task", "listops", "-", *options]) == 0
        assert capsys.readouterr().out == text
    assert main(["solve", "--task", "listops", "[MAX 2 9 ]"]) == 0
    assert "MAX" in capsys.readouterr().out
    assert main(["solve", "--task", "listops", "[MAX 1 2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("legolab: error: token 3: end of input") and err.count("\n") == 1
    monkeypatch.setattr("sys.stdin", io.StringIO("[MAX 1 2 ]\t1\n[SM 1 ]]\n"))
    assert main(["solve", "--task", "listops", "-"]) == 2
    assert capsys.readouterr().err.startswith("legolab: error: line 2: token 3: trailing")
    assert main(["generate", "--task", "listops", "max_depth=0"]) == 2
    assert capsys.readouterr().err.startswith("legolab: error: task.max_depth:")


def test_a_tiny_model_learns_max(tmp_path):
    """Depth 1, MAX of 2..5 digits: a 2-layer, 32-wide model beats the majority class (the digit
    9: 30.0% of these 1,000 test expressions) by a wide margin in 300 steps (measured: 0.971)."""
    from legolab.training.config import config_from_dict
    from legolab.training.trainer import train

    cfg = config_from_dict({
        "name": "listops-max", "seed": 0,
        "task": {"name": "listops", "max_depth": 1, "max_length": 7, "operators": ["MAX"]},
        "model": {"n_layers": 2, "d_model": 32, "n_heads": 2, "norm": "pre", "max_len": 9},
        "train": {"test_size": 1000, "batch_size": 64, "steps": 300, "eval_every": 300, "lr": 3e-3, "warmup": 0.1,
                  "threads": 1},
    })
    records = train(cfg, tmp_path / "run", progress=False)
    test = cfg.make_task().sample("test", range(1000))
    majority = np.bincount(test.targets[test.index >= 0]).max() / (test.index >= 0).sum()
    assert 0.28 < majority < 0.33
    assert records[-1]["test_acc"] > majority + 0.5, (records[-1]["test_acc"], majority)


def test_shallower_and_deeper_variants_keep_the_vocabulary_and_their_labels_are_right():
    """with_length(k): heights 1..k, the same vocabulary and classes; the deeper variant's labels
    still agree with the independent evaluator, and a curriculum / mixed depths train."""
    task = make(seed=3)
    words = np.array(task.vocab.tokens, dtype=object)
    for k in (1, 2, 5):
        variant = task.with_length(k)
        assert variant.num_indices == k and variant.vocab.tokens == task.vocab.tokens
        assert variant.num_classes == task.num_classes
        batch = variant.sample("test", range(300))
        assert set(np.unique(batch.index[batch.index >= 0])) == set(range(k))
        lengths = (batch.tokens != 0).sum(1)
        for i in range(len(batch)):
            nodes = []
            evaluate(parse(list(words[batch.tokens[i, 1:lengths[i] - 1]])), task.config.modulus, nodes)
            assert [n["value"] for n in nodes] == batch.targets[i][batch.index[i] >= 0].tolist()
    assert task.with_length(5).seq_len > task.seq_len  # deeper trees get a longer window


def test_mixed_depths_train(tmp_path):
    from legolab.training.config import config_from_dict
    from legolab.training.trainer import train

    cfg = config_from_dict({
        "name": "mixed", "task": {"name": "listops", "max_depth": 3, "max_length": 30},
        "model": {"n_layers": 1, "d_model": 16, "n_heads": 2, "max_len": 32},
        "train": {"train_size": 0, "test_size": 50, "batch_size": 8, "steps": 4, "eval_every": 2, "n_min": 1}})
    records = train(cfg, tmp_path / "r", progress=False)
    assert len(records[-1]["test_acc_per_index"]) == 3


def test_reproduce_listops_trains_each_operator_alone_and_jointly_and_judges(tmp_path, monkeypatch):
    """`legolab reproduce listops`, its runs shrunk: MAX, MED, SM alone and the mixture; every
    model tested on one operator at a time; two verdicts, the table and the bar chart."""
    import dataclasses
    import json

    import legolab.reproduce.analyses as analyses
    from legolab.reproduce import reproduce
    from legolab.training.config import load_config

    full = analyses.listops_runs("cpu", 1)
    assert [mix for mix, _ in full] == ["MAX", "MED", "SM", "MAX+MED+SM"]
    assert load_config(full[2][1].config, full[2][1].overrides).task["operators"] == ["SM"]
    tiny = ["train.steps=4", "train.eval_every=2", "train.test_size=20", "model.n_layers=1", "model.d_model=16"]
    monkeypatch.setattr(analyses, "listops_runs", lambda scale, seeds: [
        (mix, dataclasses.replace(run, overrides=[*run.overrides, *tiny])) for mix, run in full])
    monkeypatch.setattr(analyses, "LISTOPS_TEST", 50)
    report = reproduce("listops", seeds=1, runs_root=str(tmp_path / "runs"), out_root=str(tmp_path / "out"),
                       log=lambda *_: None)
    text = report.read_text()
    assert "| SM |" in text and "SM is the hardest" in text and (report.parent / "operators.png").exists()
    summary = json.loads((report.parent / "summary.json").read_text())
    assert set(summary["summary"]["alone"]) == {"MAX", "MED", "SM"} and set(summary["summary"]["joint"]) == {"MAX", "MED", "SM"}
    assert [v[1] for v in summary["verdicts"]] != [] and all(v[1] in ("holds", "does not hold") for v in summary["verdicts"])
