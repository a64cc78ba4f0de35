"""Trustworthy runs: no silent mixing of runs, no silent corruption, interrupts that resume exactly."""

import os
import re
import signal
import subprocess
import sys

import pytest
import torch
import yaml
from conftest import strip_clock

from legolab.cli import main
from legolab.errors import Interrupted, LegoError
from legolab.io import read_jsonl
from legolab.training import trainer
from legolab.training.checkpoint import read_checkpoint
from legolab.training.config import load_config
from legolab.training.rundir import RunDir


def one_line_error(capsys, code, expect):
    err = capsys.readouterr().err
    assert code == 2, err
    assert expect in err and err.count("\n") == 1 and "Traceback" not in err, err


def test_a_start_that_fails_leaves_nothing_and_a_retry_works(tiny_config, tmp_path, capsys):
    path, runs = tiny_config(), tmp_path / "runs"
    # fails after the directory was claimed (the init weights are read while setting up)
    code = main(["train", str(path), "train.init=" + str(tmp_path / "missing.safetensors"), "--runs", str(runs)])
    one_line_error(capsys, code, "no checkpoint at")
    assert not runs.exists() or list(runs.iterdir()) == []
    # refused before any allocation: sizes this machine cannot hold
    code = main(["train", str(path), "train.batch_size=1000000000", "--runs", str(runs)])
    one_line_error(capsys, code, "train.batch_size: 1,000,000,000 sentences need about")
    assert not runs.exists() or list(runs.iterdir()) == []
    assert main(["train", str(path), "train.steps=20", "--runs", str(runs), "--no-progress"]) == 0
    assert sorted(p.name for p in (runs / "tiny").iterdir()) == [".lock", "checkpoints", "config.yaml",
                                                                 "metrics.jsonl", "train.log"]


def test_a_run_directory_has_one_owner(tiny_config, tmp_path, capsys):
    path, runs = tiny_config(), tmp_path / "runs"
    assert main(["train", str(path), "train.steps=20", "--runs", str(runs), "--no-progress"]) == 0
    capsys.readouterr()
    held = RunDir.resume(runs / "tiny")  # another process training it
    try:
        one_line_error(capsys, main(["train", "--resume", str(runs / "tiny")]), "is being trained by another process")
    finally:
        held.close()
    # two starts of one name: the directory one of them publishes first wins, the other refuses
    first, second = RunDir.create(runs / "conc"), RunDir.create(runs / "conc")
    (first / "config.yaml").write_text("a")
    (second / "config.yaml").write_text("b")
    first.publish()
    with pytest.raises(LegoError, match="created by another run meanwhile"):
        second.publish()
    first.close()
    assert (runs / "conc" / "config.yaml").read_text() == "a"
    assert sorted(p.name for p in runs.iterdir()) == ["conc", "tiny"]  # the loser's work is gone


def test_resume_refuses_a_config_that_differs_from_its_checkpoint(tiny_config, tmp_path, capsys):
    path, runs = tiny_config(), tmp_path / "runs"
    assert main(["train", str(path), "train.steps=20", "--runs", str(runs), "--no-progress"]) == 0
    capsys.readouterr()
    saved = runs / "tiny" / "config.yaml"
    saved.write_text(saved.read_text().replace("lr: 0.003", "lr: 0.5"))
    one_line_error(capsys, main(["train", "--resume", str(runs / "tiny")]), "(train.lr: 0.003 -> 0.5)")


def test_a_run_killed_before_its_first_evaluation_resumes_from_step_zero(tiny_config, tmp_path, monkeypatch):
    cfg_path = tiny_config(train={"steps": 40, "eval_every": 20, "n_tr": 2})
    full = trainer.train(load_config(cfg_path), tmp_path / "full", progress=False)

    def killed(*a, **k):
        raise KeyboardInterrupt  # kill -9 alike: nothing saved at the first evaluation

    monkeypatch.setattr(trainer, "evaluate", killed)
    with pytest.raises(KeyboardInterrupt):
        trainer.train(load_config(cfg_path), tmp_path / "killed", progress=False)
    monkeypatch.undo()
    assert read_checkpoint(tmp_path / "killed" / "checkpoints" / "last.safetensors")[1]["step"] == 0
    resumed = trainer.start_or_resume(None, [], resume_dir=tmp_path / "killed", progress=False)
    assert strip_clock(resumed) == strip_clock(full)


def test_sigterm_saves_the_current_step_and_resume_equals_an_uninterrupted_run(tiny_config, tmp_path, monkeypatch):
    cfg_path = tiny_config(model={"dropout": 0.1}, train={"steps": 60, "eval_every": 20})
    full = trainer.train(load_config(cfg_path), tmp_path / "full", progress=False)
    real = trainer.Reporter.on_step

    def signal_at_step_30(self, step, loss):
        real(self, step, loss)
        if step == 30:  # between evaluations: the train-accuracy sums of steps 21..30 must survive
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(trainer.Reporter, "on_step", signal_at_step_30)
    with pytest.raises(Interrupted, match=r"stopped at step 30 of 60 \(SIGTERM\).*legolab train --resume") as e:
        trainer.train(load_config(cfg_path), tmp_path / "stopped", progress=False)
    assert e.value.signum == signal.SIGTERM
    last_line = (tmp_path / "stopped" / "train.log").read_text().splitlines()[-1]
    assert last_line.startswith("stopped at step 30 (last evaluation at step 20): test accuracy")  # not "finished"
    monkeypatch.undo()
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # the handler does not outlive the run
    assert read_checkpoint(tmp_path / "stopped" / "checkpoints" / "last.safetensors")[1]["step"] == 30
    resumed = trainer.start_or_resume(None, [], resume_dir=tmp_path / "stopped", progress=False)
    assert strip_clock(resumed) == strip_clock(full)


def test_sigterm_during_mimicking_saves_it_and_the_same_call_continues_to_the_uninterrupted_weights(tiny_config, tmp_path):
    from legolab.reproduce.runs import _mimic_steps
    from legolab.training.mimic import PARTIAL, mimic

    cfg = load_config(tiny_config(model={"dropout": 0.1}))
    settings = dict(steps=20, batch_size=8, lr=1e-2, log_every=5)
    mimic(cfg, tmp_path / "full", log=lambda m: None, **settings)

    def signal_at_step_10(line):
        if "step     10/" in line:
            os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(Interrupted, match=r"mimicking stopped at step 10 of 20 \(SIGTERM\), checkpoint saved") as e:
        mimic(cfg, tmp_path / "stopped", log=signal_at_step_10, **settings)
    assert e.value.signum == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    stopped = tmp_path / "stopped" / "checkpoints"
    assert (stopped / PARTIAL).is_file() and not (stopped / "last.safetensors").exists()
    assert _mimic_steps(tmp_path / "stopped") == 20  # reproduce sees the stage it asked for, not a shorter one
    with pytest.raises(LegoError, match="interrupted mimicking stage of other settings"):
        mimic(cfg, tmp_path / "stopped", log=lambda m: None, **{**settings, "lr": 3e-3})
    lines = []
    records = mimic(cfg, tmp_path / "stopped", log=lines.append, **settings)
    assert lines[0].startswith("mimic: continuing") and "from step 10 of 20" in lines[0]
    assert not (stopped / PARTIAL).exists()
    assert strip_clock(records) == strip_clock(read_jsonl(tmp_path / "full" / "mimic.jsonl"))
    full, resumed = (read_checkpoint(d / "checkpoints" / "last.safetensors")[0] for d in (tmp_path / "full", tmp_path / "stopped"))
    assert full.keys() == resumed.keys() and all(torch.equal(full[k], resumed[k]) for k in full)


def test_an_interrupted_run_reaches_the_parent_of_a_reproduce_worker_intact():
    """``reproduce --jobs`` workers send exceptions pickled: an unpicklable one breaks the pool and
    stops the other runs without a checkpoint."""
    import pickle

    e = pickle.loads(pickle.dumps(Interrupted(signal.SIGTERM, "runs/x: stopped at step 30")))
    assert isinstance(e, Interrupted) and e.signum == signal.SIGTERM and str(e) == "runs/x: stopped at step 30"


@pytest.mark.slow
def test_sigint_from_outside_exits_130_with_the_resume_command(tiny_config, tmp_path):
    path = tiny_config(train={"steps": 100000, "eval_every": 50})
    proc = subprocess.Popen([sys.executable, "-m", "legolab", "train", str(path), "--runs", str(tmp_path), "--no-progress"],
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    for line in proc.stderr:
        if re.match(r"step +50 ", line):  # the first evaluation: training is under way
            proc.send_signal(signal.SIGINT)
            break
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 130, err
    assert f"continue with: legolab train --resume {tmp_path / 'tiny'}" in err and "Traceback" not in err
    assert read_checkpoint(tmp_path / "tiny" / "checkpoints" / "last.safetensors")[1]["step"] >= 50


def test_a_flipped_byte_in_a_checkpoint_is_refused(tiny_config, tmp_path, capsys):
    path, runs = tiny_config(), tmp_path / "runs"
    assert main(["train", str(path), "train.steps=20", "--runs", str(runs), "--no-progress"]) == 0
    capsys.readouterr()
    ckpt = runs / "tiny" / "checkpoints" / "last.safetensors"
    data = bytearray(ckpt.read_bytes())
    data[-200] ^= 0x01  # inside the tensors, past the header
    ckpt.write_bytes(bytes(data))
    one_line_error(capsys, main(["eval", str(runs / "tiny"), "--count", "10"]), "is corrupted")


def test_best_is_chosen_on_validation_and_reported_on_test(tiny_config, tmp_path):
    cfg = load_config(tiny_config(train={"steps": 80, "eval_every": 20, "valid_size": 200}))
    records = trainer.train(cfg, tmp_path / "run", progress=False)
    assert all(0 <= r["valid_acc_supervised"] <= 1 for r in records)
    best = max(records, key=lambda r: r["valid_acc_supervised"])
    _, meta = read_checkpoint(tmp_path / "run" / "checkpoints" / "best.safetensors")
    assert meta["step"] == best["step"] and meta["best"] == best["valid_acc_supervised"]
    assert [r["valid_acc"] for r in records] != [r["test_acc"] for r in records]  # its own sentences


def test_training_sentences_that_are_test_sentences_get_no_supervision(tiny_config, tmp_path):
    # n = 3 over 3 variable names: 288 distinct sentences, so train and test streams share most
    cfg = load_config(tiny_config(task={"group": "sign", "n": 3, "n_vars": 3}, train={"n_tr": 3, "steps": 40, "eval_every": 20}))
    records = trainer.train(cfg, tmp_path / "run", progress=False)
    assert 0 < records[0]["train_overlap"] < records[1]["train_overlap"]
    # n = 12: practically none
    cfg = load_config(tiny_config(task={"group": "sign", "n": 12}, train={"n_tr": 6, "steps": 20, "eval_every": 20}))
    assert trainer.train(cfg, tmp_path / "run12", progress=False)[-1]["train_overlap"] == 0


def test_train_log_mirrors_the_evaluations(tiny_config, tmp_path):
    trainer.train(load_config(tiny_config()), tmp_path / "run", progress=False)
    lines = (tmp_path / "run" / "train.log").read_text().splitlines()
    assert lines[0].startswith("tiny: bert 2x32") and lines[-1].startswith("finished at step 60")
    assert [line.split()[1] for line in lines if line.startswith("step")] == ["20", "40", "60"]


def test_tensorboard_writer(tiny_config, tmp_path, capsys):
    path, runs = tiny_config(), tmp_path / "runs"
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        one_line_error(capsys, main(["train", str(path), "train.log=tensorboard", "--runs", str(runs)]),
                       "needs the tensorboard package")
        assert not runs.exists() or list(runs.iterdir()) == []
        return
    assert main(["train", str(path), "train.log=tensorboard", "--runs", str(runs), "--no-progress"]) == 0
    assert list((runs / "tiny" / "tensorboard").glob("events.out.tfevents.*"))


def test_shipped_configs_by_name_from_any_directory(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["configs"]) == 0
    listed = capsys.readouterr().out
    assert "cpu/bert " in listed and "paper/bert-base" in listed
    assert load_config("cpu/bert").name == "cpu-bert" and load_config("configs/cpu/albert.yaml").model.arch == "albert"
    one_line_error(capsys, main(["train", "cpu/nope"]), "no such file and no shipped config")


def test_reproduce_refuses_runs_of_another_config(tmp_path, monkeypatch, capsys):
    from test_reproduce import write_configs

    write_configs(tmp_path)
    monkeypatch.chdir(tmp_path)
    # a leftover run of the figure's name but another task
    assert main(["train", "configs/cpu/bert.yaml", "task.group=d3", "seed=0", "--name", "cpu-bert-s0",
                 "--no-progress"]) == 0
    capsys.readouterr()
    one_line_error(capsys, main(["reproduce", "fig3", "--seeds", "1"]), "holds a run of another config (task.group: 'd3' -> 'sign'")
    assert not (tmp_path / "reports").exists()


def test_the_mimicking_stage_takes_the_dropout_its_width_fits_best(tmp_path, monkeypatch):
    from legolab.training.config import load_config
    from legolab.training.mimic import stage_config

    monkeypatch.chdir(tmp_path)  # the shipped configs
    minilm, small = load_config("cpu/minilm"), load_config("cpu/bert")
    assert minilm.model.dropout == small.model.dropout == 0.0  # the CPU recipes fine-tune without
    assert stage_config(minilm).model.dropout == stage_config(minilm).model.attn_dropout == 0.1
    assert stage_config(small).model.dropout == 0.0 and stage_config(small, dropout=0.2).model.attn_dropout == 0.2
    assert stage_config(small).model.residual_init == 0.0


def test_reproduce_refuses_a_mimicking_stage_of_another_dropout(tmp_path, monkeypatch, capsys):
    from test_reproduce import write_configs

    from legolab.reproduce import figure_runs
    from legolab.training.config import load_config
    from legolab.training.mimic import mimic

    write_configs(tmp_path)
    monkeypatch.chdir(tmp_path)
    run = dict(figure_runs("fig18", "cpu", 1, mimic_steps=2))["d3-mimic-bert"]
    # a stage left with another dropout than this width's (an older legolab mimicked MiniLM with 0)
    mimic(load_config(run.config, run.overrides), tmp_path / "runs" / f"{run.name}-mimic-init",
          log=lambda line: None, **{**run.mimic, "dropout": 0.1})
    one_line_error(capsys, main(["reproduce", "fig18", "--seeds", "1", "--mimic-steps", "2"]),
                   "holds a mimicking stage of another config (model.attn_dropout: 0.1 -> 0.0; model.dropout: 0.1 -> 0.0)")
    assert not (tmp_path / "runs" / run.name).exists()


# ---- text in, text out -----------------------------------------------------------------------
def test_a_huge_invalid_sentence_gets_a_short_error(capsys):
    code = main(["solve", "a=+1; b=" + "x" * 1_000_000])
    err = capsys.readouterr().err
    assert code == 2 and len(err) < 300 and err.count("\n") == 1


def test_generate_output_feeds_back_into_solve(tmp_path, capsys, monkeypatch):
    import io

    assert main(["generate", "--count", "30", "--group", "d3", "--n", "7"]) == 0
    generated = capsys.readouterr().out
    monkeypatch.setattr(sys, "stdin", io.StringIO(generated))
    assert main(["solve", "-", "--group", "d3"]) == 0
    assert capsys.readouterr().out == generated
    monkeypatch.setattr(sys, "stdin", io.StringIO("a=+1; b=-a\nb=+1; c=-q\n"))
    code = main(["solve", "-"])
    assert code == 2 and capsys.readouterr().err.startswith("legolab: error: line 2: clause 2 'c=-q'")


def test_generate_writes_in_chunks_what_stdout_shows(tmp_path, capsys):
    assert main(["generate", "--count", "25000", "--start", "7", "--n", "3"]) == 0
    shown = capsys.readouterr().out
    assert main(["generate", "--count", "25000", "--start", "7", "--n", "3", "--out", str(tmp_path / "g.txt")]) == 0
    assert (tmp_path / "g.txt").read_text() == shown and shown.count("\n") == 25000
    assert [p.name for p in tmp_path.iterdir()] == ["g.txt"]


def test_saved_yaml_of_a_run_is_a_valid_config(tiny_config, tmp_path):
    trainer.train(load_config(tiny_config()), tmp_path / "run", progress=False)
    data = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert data["train"]["valid_size"] == 300 and data["train"]["log"] == "text"
    assert read_jsonl(tmp_path / "run" / "metrics.jsonl")[-1]["step"] == 60


def test_generate_streams_and_a_closed_pipe_is_not_an_error():
    # 10^8 sentences would take minutes and gigabytes if built in memory first
    proc = subprocess.Popen([sys.executable, "-m", "legolab", "generate", "--count", "100000000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = proc.stdout.read(4096)
    proc.stdout.close()  # the reader leaves, as `| head` does
    assert proc.wait(timeout=60) == 0
    assert first.count(b"\n") > 10 and proc.stderr.read() == b""


def test_a_run_of_an_earlier_version_reads_in_todays_metric_names(tiny_config, tmp_path):
    """Runs written before "step" meant only an optimiser step store ``test_acc_per_step``."""
    from legolab.io import write_jsonl
    from legolab.reproduce.report import run_summary
    from legolab.training.runs import run_curves

    records = trainer.train(load_config(tiny_config(train={"steps": 40, "eval_every": 20})), tmp_path / "old",
                            progress=False)
    write_jsonl(tmp_path / "old" / "metrics.jsonl",
                [{k.replace("_per_index", "_per_step"): v for k, v in r.items()} for r in records])
    assert run_curves(tmp_path / "old")[2] == records
    assert run_summary(tmp_path / "old")["final"] == records[-1]["test_acc_per_index"]
    assert trainer._records_up_to(tmp_path / "old" / "metrics.jsonl", 20) == records[:1]  # resume's reader
