import json
import os
import re
import shutil
import subprocess
import sys

import pytest
from conftest import strip_clock

from legolab.cli import main
from legolab.io import read_jsonl
from legolab.training import trainer
from legolab.training.config import load_config


def test_tiny_task_is_learned_in_seconds(tiny_config, tmp_path):
    cfg = load_config(tiny_config(task={"group": "sign", "n": 2}, train={"n_tr": 2, "steps": 300, "eval_every": 100}))
    records = trainer.train(cfg, tmp_path / "run", progress=False)
    assert [r["step"] for r in records] == [100, 200, 300]
    assert min(records[-1]["test_acc_per_index"]) >= 0.98
    assert records[0]["test_acc"] < records[-1]["test_acc"]
    # each record says what its time was measured on (a resumed run may move)
    assert {r["machine"] for r in records} == {records[0]["machine"]}
    assert re.fullmatch(r".+, \d+ threads?, (fp32|bf16)", records[0]["machine"])


@pytest.mark.parametrize("recipe", [False, True], ids=["plain", "cpu-recipe-aids"])
def test_resume_after_a_kill_gives_exactly_the_uninterrupted_metrics(tiny_config, tmp_path, monkeypatch, recipe):
    # dropout on, so the restored RNG state matters; stochastic depth on a tied model, so depth draws do;
    # the CPU recipe's aids follow schedules of the step, which resume must pick up mid-ramp
    aids = {"scaffold": 8.0, "scaffold_steps": 20, "guide": 1.0, "guide_steps": 20, "deep": 1.0,
            "aux_operand": 1.0} if recipe else {}
    path = tiny_config(model={"arch": "albert", "n_layers": 3, "d_model": 32, "n_heads": 2, "dropout": 0.1,
                              "conv": 7 if recipe else 0},
                       train={"steps": 60, "eval_every": 20, "depth_min": 1, "depth_max": 4, "eval_depth": 3, **aids})
    cfg = load_config(path)
    full = trainer.train(cfg, tmp_path / "full", progress=False)

    calls = {"n": 0}
    real = trainer.evaluate

    def killed_on_third(*a, **k):
        calls["n"] += 1
        if calls["n"] == 5:  # third evaluation (test, then validation each): 20 steps past the last checkpoint
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(trainer, "evaluate", killed_on_third)
    with pytest.raises(KeyboardInterrupt):
        trainer.train(load_config(path), tmp_path / "killed", progress=False)
    monkeypatch.setattr(trainer, "evaluate", real)
    assert [r["step"] for r in read_jsonl(tmp_path / "killed" / "metrics.jsonl")] == [20, 40]
    resumed = trainer.start_or_resume(None, [], resume_dir=tmp_path / "killed", progress=False)
    assert strip_clock(resumed) == strip_clock(full)
    assert strip_clock(read_jsonl(tmp_path / "killed" / "metrics.jsonl")) == strip_clock(full)


def test_fixed_training_set_runs_by_epochs(tiny_config, tmp_path):
    cfg = load_config(tiny_config(train={"train_size": 320, "steps": 0, "epochs": 3, "eval_every": 0,
                                         "supervise": [0, 3]}))
    records = trainer.train(cfg, tmp_path / "run", progress=False)
    assert [r["epoch"] for r in records] == [1.0, 2.0, 3.0] and records[-1]["sentences"] == 960
    assert (tmp_path / "run" / "checkpoints" / "best.safetensors").is_file()


@pytest.mark.slow
def test_ddp_two_processes_match_one_process(tiny_config, tmp_path):
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable)) or shutil.which("torchrun")
    if torchrun is None:
        pytest.skip("torchrun not found")
    path = tiny_config(train={"steps": 40, "eval_every": 20, "batch_size": 32})
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run([torchrun, "--standalone", "--nproc_per_node", "2", "-m", "legolab", "train", str(path),
                    "--runs", str(tmp_path / "ddp"), "--no-progress"], check=True, env=env, capture_output=True, timeout=300)
    single = trainer.train(load_config(path), tmp_path / "single", progress=False)
    ddp = read_jsonl(tmp_path / "ddp" / "tiny" / "metrics.jsonl")
    assert len(ddp) == len(single) == 2
    for a, b in zip(ddp, single):
        for key in ("train_loss", "train_acc", "test_acc", "test_loss"):
            assert a[key] == pytest.approx(b[key], abs=1e-5), key
        assert a["test_acc_per_index"] == pytest.approx(b["test_acc_per_index"], abs=1e-6)


def test_cli_train_eval_plot_and_refusals(tiny_config, tmp_path, capsys):
    path = tiny_config()
    runs = tmp_path / "runs"
    assert main(["train", str(path), "train.steps=40", "--runs", str(runs), "--no-progress"]) == 0
    run = runs / "tiny"
    assert (run / "config.yaml").is_file() and len(read_jsonl(run / "metrics.jsonl")) == 2
    capsys.readouterr()
    assert main(["eval", str(run), "--n", "6", "--count", "100", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert len(result["acc_per_index"]) == 6
    assert main(["plot", str(run)]) == 0 and (run / "accuracy.png").stat().st_size > 1000
    # refusals: an existing run, a resume with another config, a run directory without checkpoint
    assert main(["train", str(path), "train.steps=40", "--runs", str(runs)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main(["train", "--resume", str(run), "train.lr=0.1"]) == 2
    err = capsys.readouterr().err
    assert "was trained with another config (train.lr: 0.003 -> 0.1)" in err and err.count("\n") == 1
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["eval", str(empty)]) == 2
    assert "not a run directory" in capsys.readouterr().err


@pytest.mark.parametrize("override,message", [
    ("train.n_tr=9", "train.n_tr: must be between 0 and 4, the task's 4 indices"),
    ("task.group=q8", "unknown group"),
    ("train.lr=0", "train.lr: must be positive"),
    ("train.lr=-1e-3", "train.lr: must be positive"),
    ("train.batch_size=0", "train.batch_size: must be a positive integer"),
    ("train.depth_min=5", "set both depth_min and depth_max"),
    ("train.depth_max=9", "set both"),
    ("model.n_heads=3", "model.n_heads: must divide"),
    ("train.bogus=1", "train.bogus: unknown key"),
    ("model.lr=1", "model.lr: unknown key"),
    ("train.lr=fast", "train.lr: expected a number"),
    ("oops=1", "oops: unknown key"),
    ("train.lr=inf", "train.lr: must be a finite number"),
    ("train.clip=nan", "train.clip: must be a finite number"),
    ("train.warmup=nan", "train.warmup: must be a finite number"),
])
def test_invalid_configs_fail_before_work_with_one_line(tiny_config, tmp_path, capsys, override, message):
    assert main(["train", str(tiny_config()), override, "--runs", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not (tmp_path / "runs").exists()


def test_depth_range_beyond_an_untied_model_is_refused(tiny_config, tmp_path, capsys):
    assert main(["train", str(tiny_config()), "train.depth_min=1", "train.depth_max=4", "--runs", str(tmp_path)]) == 2
    assert "an untied model has only model.n_layers=2 layers" in capsys.readouterr().err


def test_init_from_a_checkpoint_of_another_shape_is_refused(tiny_config, tmp_path, capsys):
    runs = tmp_path / "runs"
    assert main(["train", str(tiny_config()), "train.steps=20", "--runs", str(runs), "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["train", str(tiny_config()), "model.d_model=64", f"train.init={runs / 'tiny'}", "--name", "wide",
                 "--runs", str(runs)]) == 2
    err = capsys.readouterr().err
    assert "checkpoint of another shape" in err and err.count("\n") == 1
    empty = tmp_path / "empty-run"
    (empty / "checkpoints").mkdir(parents=True)
    assert main(["train", str(tiny_config()), f"train.init={empty}", "--name", "x", "--runs", str(runs)]) == 2
    assert "has no checkpoint" in capsys.readouterr().err


@pytest.mark.slow
def test_bf16_autocast_learns_like_fp32(tiny_config, tmp_path):
    path = tiny_config(task={"group": "sign", "n": 2}, train={"n_tr": 2, "steps": 300, "eval_every": 100})
    fp32 = trainer.train(load_config(path), tmp_path / "fp32", progress=False)
    bf16 = trainer.train(load_config(path, ["train.dtype=bf16"]), tmp_path / "bf16", progress=False)
    assert min(bf16[-1]["test_acc_per_index"]) >= 0.98 and min(fp32[-1]["test_acc_per_index"]) >= 0.98
    assert bf16[0]["train_loss"] != fp32[0]["train_loss"]  # it really computed in bf16


def test_a_run_whose_loss_blows_up_stops_with_one_line(tiny_config, tmp_path, capsys):
    runs = tmp_path / "runs"
    assert main(["train", str(tiny_config()), "train.lr=1e30", "train.clip=0", "train.warmup=0", "--runs", str(runs),
                 "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "the training loss became non-finite before step" in err
    for r in read_jsonl(runs / "tiny" / "metrics.jsonl"):
        assert r["train_loss"] == r["train_loss"]  # no NaN record was written
