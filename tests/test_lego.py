import numpy as np
import pytest

from legolab.errors import ConfigError
from legolab.tasks import LegoConfig, LegoTask, task_config
from legolab.tasks.lego_text import solve

CASES = [("sign", 12, 60_000), ("d3", 12, 20_000), ("sign", 3, 5_000), ("d3", 20, 5_000), ("z5", 7, 4_000),
         ("d4", 16, 3_000), ("s3", 9, 3_000)]


@pytest.mark.parametrize("group,n,count", CASES)
def test_solver_agrees_with_generator_labels(group, n, count):
    """>= 1e5 sentences in all across groups and chain lengths."""
    task = LegoTask(LegoConfig(group=group, n=n, n_vars=max(26, n)), seed=7)
    batch = task.sample("train", np.arange(count))
    for i in range(count):
        chain = solve(task.clauses(batch.tokens[i]), task.group)
        variables = [task.variables[v] for v in batch.meta["variables"][i]]
        assert [v for v, _ in chain] == variables
        assert [x for _, x in chain] == batch.meta["values"][i].tolist()
        # the read-out at each slot is the assigned variable, its target is that variable's value
        for slot in range(n):
            step = batch.index[i, slot]
            assert task.vocab.tokens[batch.tokens[i, batch.positions[i, slot]]] == variables[step]
            assert batch.targets[i, slot] == chain[step][1]


def test_layout_matches_the_paper():
    task = LegoTask(LegoConfig(n=12))
    b = task.sample("train", np.arange(4))
    assert b.tokens.shape == (4, 62)
    assert (b.positions == 1 + 5 * np.arange(12)).all()
    toks = task.vocab.decode(b.tokens[0])
    assert toks[0] == "[BOS]" and toks[-1] == "[EOS]"
    assert toks[2::5][:12] == ["="] * 12 and toks[5::5][:12] == [";"] * 12
    assert sorted(b.index[0]) == list(range(12))
    assert len(set(b.meta["variables"][0])) == 12


def test_same_seed_same_bytes_and_per_index_reproducibility():
    task = LegoTask(LegoConfig(group="d3"), seed=3)
    full = task.sample("train", np.arange(1000))
    again = LegoTask(LegoConfig(group="d3"), seed=3).sample("train", np.arange(1000))
    assert full.tokens.tobytes() == again.tokens.tobytes()
    parts = [task.sample("train", np.arange(lo, min(lo + 77, 1000))) for lo in range(0, 1000, 77)]
    assert (np.concatenate([p.tokens for p in parts]) == full.tokens).all()
    picked = np.array([999, 5, 500, 5])
    assert (task.sample("train", picked).tokens == full.tokens[picked]).all()
    assert (full[10:20].targets == task.sample("train", np.arange(10, 20)).targets).all()


def test_streams_and_seeds_are_independent():
    task = LegoTask(LegoConfig(), seed=0)
    train, test = task.sample("train", np.arange(200)), task.sample("test", np.arange(200))
    other = LegoTask(LegoConfig(), seed=1).sample("train", np.arange(200))
    assert (train.tokens != test.tokens).any(axis=1).mean() > 0.99
    assert (train.tokens != other.tokens).any(axis=1).mean() > 0.99


def test_values_operators_and_order_are_uniform():
    task = LegoTask(LegoConfig(group="d3", n=12), seed=0)
    b = task.sample("train", np.arange(60_000))
    for arr, k in [(b.meta["values"], 6), (b.meta["ops"], 6), (b.index[:, 0], 12), (b.meta["variables"][:, 0], 26)]:
        freq = np.bincount(arr.ravel(), minlength=k) / arr.size
        assert np.abs(freq - 1 / k).max() < 0.01
    # the first operator is the first value (root is the identity)
    assert (b.meta["ops"][:, 0] == b.meta["values"][:, 0]).all()


def test_variable_length_sentences_are_padded_and_marked():
    task = LegoTask(LegoConfig(n=8, n_min=3), seed=0)
    b = task.sample("train", np.arange(3000))
    lengths = (b.index >= 0).sum(1)
    assert lengths.min() == 3 and lengths.max() == 8
    for i in range(200):
        m = lengths[i]
        assert task.vocab.tokens[b.tokens[i, 1 + 5 * m]] == "[EOS]"
        assert (b.tokens[i, 2 + 5 * m:] == 0).all()
        assert sorted(b.index[i, :m]) == list(range(m)) and (b.index[i, m:] == -1).all()
        chain = solve(task.clauses(b.tokens[i]), task.group)
        assert [x for _, x in chain] == b.meta["values"][i, :m].tolist()


def test_large_alphabet_for_long_chains():
    task = LegoTask(LegoConfig(n=40, n_vars=60))
    b = task.sample("train", np.arange(50))
    names = {task.variables[v] for v in b.meta["variables"].ravel()}
    assert any(len(v) > 1 for v in names)
    assert [x for _, x in solve(task.clauses(b.tokens[0]), task.group)] == b.meta["values"][0].tolist()


@pytest.mark.parametrize("values,message", [
    (dict(n=0), "task.n"), (dict(n=30), "task.n_vars"), (dict(n=5, n_min=6), "task.n_min"),
    (dict(group="q8"), "unknown group"), (dict(bogus=1), "task.bogus: unknown key"),
])
def test_invalid_task_configs(values, message):
    with pytest.raises(ConfigError, match=message):
        task_config("lego", **values)
