"""Template tasks with unseen symbols (seed 004)."""

from __future__ import annotations

import numpy as np
import pytest

from legolab.cli import main
from legolab.errors import ConfigError, ParseError
from legolab.tasks import make_task, task_config
from legolab.tasks.templates import NAMED, canonical, distinct_draws, fits_template


def make(seed: int = 0, **values):
    return make_task("template", task_config("template", **values), seed=seed)


@pytest.mark.parametrize("templates", ["aba-abb", "aabb-abab", "majority-5", "random", "AxB:0,ABx:1,xAB:2"])
def test_labels_agree_with_an_independent_evaluator(templates):
    """10^5 examples over all splits: each fits exactly its labelled template, by string matching."""
    task = make(templates=templates, train_symbols=64, test_symbols=500)
    for split, count in (("train", 50_000), ("test", 50_000)):
        batch = task.sample(split, range(count))
        words = [task.vocab.decode(row[:-1]) for row in batch.tokens]
        for i in range(0, count, 7 if count > 10_000 else 1):  # every 7th: ~14k string checks per split
            fitting = [(t, y) for t, y in task.templates if fits_template(words[i], t)]
            assert len(fitting) == 1, (words[i], fitting)
            assert task.class_names()[batch.targets[i, 0]] == fitting[0][1]
        # the vectorised check on all of them: equality pattern of the row = its template's
        eq = batch.tokens[:, :-1, None] == batch.tokens[:, None, :-1]
        patterns = np.array([[[a == b for b in canonical(t)] for a in canonical(t)] for t, _ in task.templates])
        np.testing.assert_array_equal(eq, patterns[batch.meta["template"][:, 0]])


def test_train_and_test_alphabets_are_disjoint():
    task = make(train_symbols=16, test_symbols=100)
    train = set(task.sample("train", range(5000)).tokens[:, :-1].ravel())
    test = set(task.sample("test", range(5000)).tokens[:, :-1].ravel())
    valid = set(task.sample("valid", range(5000)).tokens[:, :-1].ravel())
    assert not train & test and not train & valid and not valid & test
    assert train == {task.vocab[s] for s in task.train_names}, "every training symbol is used"
    assert len(test) == 100


def test_injective_fill_and_uniform_draws():
    u = np.random.default_rng(0).integers(0, 2**32, size=(100_000, 3), dtype=np.uint64)
    d = distinct_draws(u, 5)
    assert (d >= 0).all() and (d < 5).all()
    assert (d[:, 0] != d[:, 1]).all() and (d[:, 1] != d[:, 2]).all() and (d[:, 0] != d[:, 2]).all()
    _, counts = np.unique(d[:, 0] * 25 + d[:, 1] * 5 + d[:, 2], return_counts=True)
    assert len(counts) == 60 and counts.min() > 1500 and counts.max() < 1850  # 60 ordered triples, ~1667 each


def test_deterministic_and_per_index():
    a = make(seed=3).sample("train", range(2000))
    b = make(seed=3).sample("train", [1999, 7])
    np.testing.assert_array_equal(b.tokens, a.tokens[[1999, 7]])
    assert not np.array_equal(make(seed=4).sample("train", range(2000)).tokens, a.tokens)


def test_copy_labels_are_the_filled_symbol():
    task = make(templates="ABA:B,ABB:A")
    assert task.num_classes == len(task.vocab)
    batch = task.sample("test", range(500))
    for row, target, which in zip(batch.tokens, batch.targets[:, 0], batch.meta["template"][:, 0]):
        assert target == row[1 if which == 0 else 0]


def test_default_sizes_follow_the_seed_convention():
    assert make(train_symbols=256).default_sizes()["train_size"] == 256


def test_named_sets_and_majority_rule():
    assert NAMED["aba-abb"] == "ABA:0,ABB:1"
    task = make(templates="majority-4", train_symbols=16)
    labels = dict(task.templates)
    assert labels["AAAB"] == "1" and labels["AABB"] == "0" and labels["ABBB"] == "0" and len(labels) == 8


@pytest.mark.parametrize("values, message", [
    ({"templates": "ABA:0,BAB:1"}, "BAB is ABA with wildcards renamed"),
    ({"templates": "ABA:0,AB:1"}, "same length"),
    ({"templates": "ABA:0"}, "at least two"),
    ({"templates": "AB1:0,ABB:1"}, "is not TEMPLATE:LABEL"),
    ({"templates": "ABA:C,ABB:A"}, "not one of its wildcards"),
    ({"templates": "ABA:0,ABB:A"}, "not a mix"),
    ({"templates": "nonsense"}, "is not TEMPLATE:LABEL"),
    ({"train_symbols": 1}, "task.train_symbols: must be at least the 2 wildcards"),
    ({"test_symbols": 0}, "task.test_symbols: must be an integer"),
    ({"templates": "random", "length": 2, "n_wildcards": 2, "n_templates": 5}, "only 2 inequivalent templates"),
])
def test_bad_configs_are_one_line(values, message):
    with pytest.raises(ConfigError, match=message):
        task_config("template", **values)


def test_solve_text_and_errors():
    task = make()
    assert task.solve_text("x y x").endswith("ABA:0")
    assert task.solve_text("q r r").endswith("ABB:1")
    with pytest.raises(ParseError, match="expected 3 symbols"):
        task.solve_text("x y")
    with pytest.raises(ParseError, match="fits none"):
        task.solve_text("x x x")


def test_cli_round_trip(capsys, monkeypatch):
    import io

    assert main(["generate", "--task", "template", "templates=aabb-abab", "--count", "50"]) == 0
    text = capsys.readouterr().out
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    assert main(["solve", "-", "--task", "template", "templates=aabb-abab"]) == 0
    assert capsys.readouterr().out == text


def test_reproduce_templates_resolves_its_runs():
    from legolab.reproduce import TEMPLATE_MODELS, TEMPLATE_SIZES, TEMPLATE_TASKS, template_runs
    from legolab.training.config import load_config

    runs = template_runs("cpu", 2)
    assert len(runs) == len(TEMPLATE_TASKS) * len(TEMPLATE_MODELS) * len(TEMPLATE_SIZES) * 2
    for (task, model, n), run in runs[:: len(TEMPLATE_SIZES) - 1]:
        cfg = load_config(run.config, run.overrides)
        assert cfg.task["templates"] == task and cfg.train.train_size == n == cfg.task["train_symbols"]
        assert cfg.model.identity_scaled == (model == "identity")


def test_identity_mult_needs_identity_scaled():
    from legolab.models.encoder import ModelConfig

    with pytest.raises(ConfigError, match="model.identity_mult"):
        ModelConfig(identity_mult=10).validate()
    ModelConfig(identity_scaled=True, identity_mult=10).validate()
