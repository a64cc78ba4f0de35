"""Every registered task, and a toy task written as a new user would, through the whole pipeline:
the contract's invariants, then generate -> train -> eval -> plot -> analyze."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from legolab.cli import main
from legolab.errors import ConfigError
from legolab.tasks import TASKS, Batch, Task, Vocab, make_task, register_task, supports, task_config
from legolab.tasks.base import PAD, TOKEN_DTYPE, random_words
from legolab.training.config import config_from_dict
from legolab.training.trainer import train


# ---- a toy task in 25 lines: the prefix parity of a bit string, read at every bit ----------
@dataclass
class ParityConfig:
    length: int = 6

    def validate(self) -> None:
        if not isinstance(self.length, int) or not 1 <= self.length <= 32:
            raise ConfigError(f"task.length: must be an integer in 1..32, got {self.length!r}")


class ParityTask(Task):
    """Toy: the parity of every prefix of a bit string."""

    name = "toy-parity"
    config_class = ParityConfig
    index_name = "position"

    def __init__(self, config: ParityConfig, seed: int = 0):
        super().__init__(config, seed)
        self.vocab = Vocab([PAD, "0", "1"])
        self.num_classes, self.num_indices, self.seq_len = 2, config.length, config.length

    def sample(self, split: str, indices) -> Batch:
        L = self.config.length
        bits = ((random_words(self.seed, split, np.asarray(indices), 1) >> np.arange(L, dtype=np.uint64)) & np.uint64(1))
        bits = bits.astype(np.int64)
        positions = np.broadcast_to(np.arange(L), bits.shape).copy()
        return Batch((bits + 1).astype(TOKEN_DTYPE), positions, np.cumsum(bits, 1) % 2, positions.copy())


@pytest.fixture
def toy_task():
    register_task(ParityTask)
    yield ParityTask.name
    del TASKS[ParityTask.name]


def task_names():
    return sorted(TASKS) + ["toy-parity"]


@pytest.fixture(params=task_names())
def task_name(request, toy_task):
    return request.param


# ---- the contract --------------------------------------------------------------------------
def test_contract_invariants(task_name):
    task = make_task(task_name, task_config(task_name), seed=3)
    batch = task.sample("train", range(300))
    assert task.vocab.tokens[0] == PAD
    assert batch.tokens.dtype == TOKEN_DTYPE and batch.tokens.shape == (300, task.seq_len)
    assert batch.positions.shape == batch.targets.shape == batch.index.shape
    valid = batch.index >= 0
    assert (batch.positions[valid] < task.seq_len).all() and (batch.positions[valid] >= 0).all()
    assert ((batch.targets[valid] >= 0) & (batch.targets[valid] < task.num_classes)).all()
    assert set(np.unique(batch.index[valid])) == set(range(task.num_indices)), "every step occurs"
    rows, cols = np.nonzero(valid)
    assert (batch.tokens[rows, batch.positions[rows, cols]] != 0).all(), "read-outs sit on real tokens"
    assert len(task.class_names()) == task.num_classes
    assert all(0 < i < len(task.vocab) for i in task.special_ids)
    roles = task.token_roles()
    assert {"query", "special"} <= set(roles)
    sizes = task.default_sizes()
    assert sizes["train_size"] >= 0 and sizes["test_size"] > 0 and 0 <= sizes["n_tr"] <= task.num_indices
    # per-index randomness: example i is the same however it is asked for
    again = make_task(task_name, task_config(task_name), seed=3).sample("train", [7, 250, 3])
    np.testing.assert_array_equal(again.tokens, batch.tokens[[7, 250, 3]])
    np.testing.assert_array_equal(again.targets, batch.targets[[7, 250, 3]])
    assert not np.array_equal(task.sample("test", range(20)).tokens, batch.tokens[:20]), "splits differ"
    assert "\t" in task.format_example(batch, 0)
    if supports(task, "with_length"):
        shorter = task.with_length(max(1, task.num_indices // 2))
        assert shorter.vocab.tokens == task.vocab.tokens and shorter.num_classes == task.num_classes
        assert shorter.num_indices == max(1, task.num_indices // 2)


def test_unknown_option_is_one_line(task_name):
    with pytest.raises(ConfigError, match=r"task\.nonsense: unknown key"):
        task_config(task_name, nonsense=1)


# ---- the pipeline --------------------------------------------------------------------------
def test_pipeline(task_name, tmp_path, capsys):
    task = make_task(task_name, task_config(task_name))
    cfg = config_from_dict({
        "name": "conformance", "seed": 0, "task": {"name": task_name},
        "model": {"n_layers": 2, "d_model": 32, "n_heads": 2, "norm": "pre", "max_len": task.seq_len},
        "train": {"n_tr": 0, "train_size": 0, "test_size": 40, "batch_size": 16, "steps": 6, "eval_every": 3,
                  "threads": 1},
    })
    run = tmp_path / "runs" / "conformance"
    records = train(cfg, run, progress=False)
    assert len(records) == 2 and len(records[-1]["test_acc_per_index"]) == task.num_indices
    capsys.readouterr()

    assert main(["generate", "--task", task_name, "--count", "3"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3
    assert main(["generate", "--task", task_name, "--count", "2", "--format", "jsonl"]) == 0
    assert main(["eval", str(run), "--count", "20"]) == 0
    assert f"{task.index_name}" in capsys.readouterr().out
    assert main(["plot", str(run)]) == 0
    assert main(["analyze", "attention", str(run), "--count", "4"]) == 0
    assert (run / "analysis" / "head_scores.json").is_file()
    assert main(["analyze", "probe", str(run), "--train", "40", "--test", "20"]) == 0
    assert (run / "analysis" / "probe.json").is_file()


def test_tasks_command_lists_every_task(toy_task, capsys):
    assert main(["tasks"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in TASKS)


def test_lego_only_options_refused_for_a_task_without_them(toy_task, tmp_path, capsys):
    base = {"name": "t", "task": {"name": toy_task}, "model": {"n_layers": 1, "d_model": 16, "n_heads": 2},
            "train": {"train_size": 0, "test_size": 10, "steps": 2, "eval_every": 1}}
    for train_values, message in (({"aux_operand": 1.0}, "has no operand read-outs"),
                                  ({"n_min": 2}, "has no length variants"),
                                  ({"curriculum_n": [2], "curriculum_steps": [1]}, "has no length variants")):
        with pytest.raises(ConfigError, match=message):
            config_from_dict({**base, "train": {**base["train"], **train_values}})
    with pytest.raises(ConfigError, match="two boundary tokens"):
        from legolab.models import build_model

        cfg = config_from_dict({**base, "model": {**base["model"], "attention": "lego-v1"}})
        build_model(cfg.model, cfg.make_task())
    assert main(["generate", "--task", toy_task, "--notation", "code"]) == 2
    assert "one text form" in capsys.readouterr().err
    assert main(["solve", "--task", toy_task, "0 1"]) == 2
    assert "no text form" in capsys.readouterr().err
