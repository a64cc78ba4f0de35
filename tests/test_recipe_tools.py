"""The CPU-recipe tools: local convolution, the attention kernel choice, the association scaffold
and guidance, deep and operand supervision, and the bf16 fast path."""

import numpy as np
import pytest
import torch

from legolab.models import ActivationCache, ModelConfig, TokenClassifier
from legolab.tasks import LegoConfig, LegoTask
from legolab.training import objectives, trainer
from legolab.training import step as step_mod
from legolab.training.config import TrainConfig, load_config
from legolab.training.objectives import recipe


def lego_batch(n=12, count=8, seed=0):
    task = LegoTask(LegoConfig(n=n), seed=seed)
    b = task.sample("train", range(count))
    return task, b, torch.from_numpy(b.tokens).long(), torch.from_numpy(b.positions).long()


def test_math_and_sdpa_kernels_agree_and_hooks_only_observe():
    task, _, x, pos = lego_batch()
    outs = {}
    for impl in ("math", "sdpa"):
        torch.manual_seed(0)
        m = TokenClassifier(ModelConfig(n_layers=2, d_model=32, n_heads=4, attn_impl=impl), len(task.vocab), 2).eval()
        plain = m(x, pos)
        observed, cache = m.run_with_cache(x, ["blocks.*.attn.hook_pattern"], positions=pos)
        assert set(cache) == {"blocks.0.attn.hook_pattern", "blocks.1.attn.hook_pattern"}
        # asking for the pattern changes nothing that is computed (same kernel either way)
        assert torch.allclose(plain, observed, atol=1e-6)
        outs[impl] = (plain, cache["blocks.1.attn.hook_pattern"])
    assert torch.allclose(outs["math"][0], outs["sdpa"][0], atol=1e-5)
    assert torch.allclose(outs["math"][1], outs["sdpa"][1], atol=1e-6)


def test_conv_changes_the_model_and_ignores_padding():
    task, _, x, pos = lego_batch(n=4, count=2)
    torch.manual_seed(0)
    m = TokenClassifier(ModelConfig(n_layers=2, d_model=32, n_heads=4, norm="pre", conv=7), len(task.vocab), 2).eval()
    with torch.no_grad():
        for blk in m.blocks:
            blk.conv.weight.zero_()
    torch.manual_seed(0)
    plain = TokenClassifier(ModelConfig(n_layers=2, d_model=32, n_heads=4, norm="pre"), len(task.vocab), 2).eval()
    plain.load_state_dict({k: v for k, v in m.state_dict().items() if ".conv." not in k})
    assert torch.allclose(m(x, pos), plain(x, pos), atol=1e-6)  # a zero kernel is the plain model
    torch.manual_seed(1)
    m = TokenClassifier(ModelConfig(n_layers=2, d_model=32, n_heads=4, norm="pre", conv=7), len(task.vocab), 2).eval()
    assert not torch.allclose(m(x, pos), plain(x, pos), atol=1e-3)
    padded = torch.cat([x, torch.full((2, 5), 7)], 1)  # junk ids behind the padding mask
    key_padding = torch.zeros_like(padded, dtype=torch.bool)
    key_padding[:, x.shape[1]:] = True
    assert torch.allclose(m(x, pos), m(padded, pos, key_padding=key_padding), atol=1e-5)


def test_scaffold_puts_head_0_on_the_other_occurrence_of_its_token():
    task, _, x, pos = lego_batch()
    torch.manual_seed(0)
    m = TokenClassifier(ModelConfig(n_layers=2, d_model=32, n_heads=4, norm="pre", init_std=0.1), len(task.vocab), 2).eval()
    same = (x[:, :, None] == x[:, None, :]) & ~torch.eye(x.shape[1], dtype=torch.bool)
    rows = same.any(-1)

    def mass(scaffold):
        c = ActivationCache(["blocks.0.attn.hook_pattern"])
        with torch.no_grad():
            m.hidden(x, cache=c, scaffold=scaffold)
        p = c["blocks.0.attn.hook_pattern"]
        return [float((p[:, h] * same).sum(-1)[rows].mean()) for h in range(4)]

    off, on = mass(0.0), mass(8.0)
    assert on[0] > 0.9 and off[0] < 0.3
    assert on[1:] == pytest.approx(off[1:])  # only head 0
    # the scaffold's schedule: full, then a linear ramp to 0
    tc = TrainConfig(scaffold=8.0, scaffold_steps=100)
    assert [tc.scaffold_bias(s) for s in (0, 99, 150, 200, 500)] == [8.0, 8.0, 4.0, 0.0, 0.0]


def test_operand_readouts_are_the_predecessors_values():
    task, b, _, _ = lego_batch(count=50)
    pos, targets, steps = task.operand_readouts(b)
    for i in range(len(b)):
        words = task.vocab.decode(b.tokens[i])
        values = {}
        for j, p in enumerate(b.positions[i]):
            values[words[p]] = b.targets[i, j]
        for j, p in enumerate(pos[i]):
            operand = words[p]
            if operand == "1":
                assert steps[i, j] == -1
            else:
                assert targets[i, j] == values[operand]
                assert steps[i, j] == b.index[i, j] - 1


def test_guidance_loss_is_learned_and_deep_supervision_changes_the_loss():
    task, b, x, pos = lego_batch(count=32)
    torch.manual_seed(0)
    m = TokenClassifier(ModelConfig(n_layers=2, d_model=32, n_heads=2, norm="pre"), len(task.vocab), 2).train()
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)

    def guidance():
        c = ActivationCache([recipe.SCORES])
        m.hidden(x, cache=c)
        return recipe.guidance_loss(c, x)

    first = float(guidance().detach())
    for _ in range(40):
        loss = guidance()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert float(guidance().detach()) < 0.5 * first
    targets = torch.from_numpy(b.targets).long()
    mask = torch.ones_like(targets, dtype=torch.bool)
    losses = []
    for deep in (0.0, 1.0):
        torch.manual_seed(0)
        m = TokenClassifier(ModelConfig(n_layers=3, d_model=32, n_heads=2, norm="pre"), len(task.vocab), 2).train()
        fn = step_mod.make_train_step(m, step_mod.make_optimizer(m, 1e-3, 0.0))
        losses.append(float(fn(x, pos, targets, mask, objectives={"deep": deep})[0]))
    assert losses[1] > losses[0] * 1.5  # two more read-outs, each near chance at init


def test_recipe_options_train_end_to_end(tiny_config, tmp_path):
    cfg = load_config(tiny_config(model={"conv": 7}, train={
        "steps": 20, "eval_every": 10, "scaffold": 4.0, "scaffold_steps": 5, "deep": 0.5, "aux_operand": 1.0,
        "guide": 0.1, "guide_steps": 5}))
    records = trainer.train(cfg, tmp_path / "r", progress=False)
    assert [r["step"] for r in records] == [10, 20] and np.isfinite(records[-1]["train_loss"])


def test_stop_rule_ends_a_run_early(tiny_config, tmp_path):
    cfg = load_config(tiny_config(train={"steps": 60, "eval_every": 10}))
    records = trainer.train(cfg, tmp_path / "r", progress=False, stop=lambda r: r["step"] >= 20)
    assert [r["step"] for r in records] == [10, 20]


def test_dtype_auto_uses_bf16_only_with_matrix_units(monkeypatch):
    cpu = torch.device("cpu")
    monkeypatch.setattr(step_mod, "bf16_matrix_units", lambda d: True)
    assert step_mod.resolve_dtype("auto", cpu) == (torch.bfloat16, None)
    monkeypatch.setattr(step_mod, "bf16_matrix_units", lambda d: False)
    dtype, note = step_mod.resolve_dtype("auto", cpu)
    assert dtype is None and "training in fp32" in note
    assert step_mod.resolve_dtype("fp32", cpu) == (None, None)
    assert step_mod.resolve_dtype("bf16", cpu) == (torch.bfloat16, None)


def test_bf16_step_tracks_fp32():
    """A few bf16 steps stay close to fp32 from the same start: fp32 master weights and loss."""
    task, b, x, pos = lego_batch(count=32)
    targets = torch.from_numpy(b.targets).long()
    mask = torch.ones_like(targets, dtype=torch.bool)
    losses = {}
    for dtype in (None, torch.bfloat16):
        torch.manual_seed(0)
        m = TokenClassifier(ModelConfig(n_layers=2, d_model=32, n_heads=2, norm="pre"), len(task.vocab), 2).train()
        fn = step_mod.make_train_step(m, step_mod.make_optimizer(m, 1e-3, 0.0), autocast_dtype=dtype)
        losses[dtype] = [float(fn(x, pos, targets, mask, clip=1.0)[0]) for _ in range(5)]
        assert all(p.dtype == torch.float32 for p in m.parameters())
    assert losses[torch.bfloat16] == pytest.approx(losses[None], rel=0.02)


@pytest.mark.parametrize("override,message", [
    ("model.conv=4", r"model.conv: must be 0 \(off\) or a positive odd"),
    ("model.attn_impl=flash", "model.attn_impl"),
    ("train.scaffold=2", "train.scaffold_steps"),
    ("train.guide=1", "train.guide_steps"),
    ("train.deep=-1", "train.deep"),
    ("train.dtype=fp16", "train.dtype"),
    ("train.objectives={nope: 1}", "train.objectives: 'nope' is not an objective"),
    ("train.objectives={deep: 1}", "deep has its own field: train.deep"),
    ("train.objectives=3", "expected a mapping"),
])
def test_invalid_recipe_options(tiny_config, override, message):
    from legolab.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        load_config(tiny_config(), [override])


@pytest.mark.parametrize("path", sorted(str(p) for p in __import__("pathlib").Path(__file__).parents[1].glob("configs/*/*.yaml")
                                        if p.stem != "pretrain"))
def test_shipped_configs_validate(path):
    cfg = load_config(path)
    assert cfg.train.total_steps() > 0


def test_the_cpu_recipe_runs_a_few_steps(tmp_path):
    from pathlib import Path

    root = Path(__file__).parents[1]
    cfg = load_config(root / "configs/cpu/bert.yaml", ["train.steps=4", "train.eval_every=2", "train.test_size=50",
                                                       "train.threads=1"])
    assert cfg.model.conv == 7 and cfg.train.guide and cfg.train.deep and cfg.train.aux_operand
    assert not cfg.train.scaffold  # dropped from Task 1's recipe on 2026-12-06 (docs/cpu_recipe.md)
    records = trainer.train(cfg, tmp_path / "r", progress=False)
    assert len(records) == 2


def test_every_cpu_figure_resolves_to_valid_configs(monkeypatch):
    from pathlib import Path

    from legolab.reproduce import FIGURES, figure_runs

    monkeypatch.chdir(Path(__file__).parents[1])
    for fig in FIGURES:
        for _, run in figure_runs(fig, "cpu", 1, None):
            load_config(run.config, run.overrides)  # raises ConfigError on any invalid combination


def test_a_new_objective_is_one_registered_function(tiny_config, tmp_path, monkeypatch):
    """Registered with the hooks it reads and weighted by train.objectives: it sees only what it
    asked for, its term enters the loss, and runs without it are unchanged."""
    monkeypatch.setitem(objectives.OBJECTIVES, "probe", None)  # so that it is removed after the test
    del objectives.OBJECTIVES["probe"]
    seen = []

    def entropy(ctx, weight):
        seen.append(sorted({k.split(".")[-1] for k in ctx.cache}))
        patterns = [v for k, v in ctx.cache.items() if k.endswith("hook_pattern")]
        return weight * sum(-(p * p.clamp_min(1e-9).log()).sum(-1).mean() for p in patterns)

    objectives.register_objective("probe", hooks=("blocks.*.attn.hook_pattern",))(entropy)
    base = trainer.train(load_config(tiny_config(train={"steps": 4, "eval_every": 2})), tmp_path / "a", progress=False)
    with_it = trainer.train(load_config(tiny_config(train={"steps": 4, "eval_every": 2, "objectives": {"probe": 0.5}})),
                            tmp_path / "b", progress=False)
    assert seen == [["hook_pattern"]] * 4
    assert with_it[0]["train_loss"] != base[0]["train_loss"]
    again = trainer.train(load_config(tiny_config(train={"steps": 4, "eval_every": 2})), tmp_path / "c", progress=False)
    assert [r["train_loss"] for r in again] == [r["train_loss"] for r in base]
