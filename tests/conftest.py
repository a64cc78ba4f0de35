import os

import pytest
import torch

# Tests compare runs bit for bit; keep the thread count fixed and small.
torch.set_num_threads(1)
os.environ.setdefault("OMP_NUM_THREADS", "1")


def strip_clock(records):
    """Records without what the clock and the machine decide (time, machine): the rest must match."""
    return [{k: v for k, v in r.items() if k not in ("time", "machine")} for r in records]


TINY = {
    "name": "tiny",
    "seed": 0,
    "task": {"group": "sign", "n": 4},
    "model": {"arch": "bert", "n_layers": 2, "d_model": 32, "n_heads": 2, "norm": "pre"},
    "train": {"n_tr": 4, "train_size": 0, "test_size": 300, "batch_size": 32, "steps": 60, "eval_every": 20,
              "lr": 3e-3, "warmup": 0.1, "threads": 1},
}


@pytest.fixture
def tiny_config(tmp_path):
    """Write a tiny run config and return its path (overrides go on the command line)."""
    import yaml

    def make(**sections):
        data = {k: (dict(v) if isinstance(v, dict) else v) for k, v in TINY.items()}
        for section, values in sections.items():
            if isinstance(values, dict):
                data[section] = {**data[section], **values}
            else:
                data[section] = values
        path = tmp_path / f"{data['name']}.yaml"
        path.write_text(yaml.safe_dump(data))
        return path

    return make
