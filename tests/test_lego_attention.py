import pytest
import torch

from legolab.analysis.flops import analytic_flops, count_flops, model_config
from legolab.models import ModelConfig, TokenClassifier
from legolab.models.lego_attention import hard_maps_dense
from legolab.tasks import LegoConfig, LegoTask
from legolab.tasks.lego_text import parse_sentence

SIGN = LegoTask(LegoConfig(n=3))


def test_hard_coded_maps_on_a_hand_written_sentence():
    # [BOS] b = - a ; a = + 1 ; c = + b ; [EOS]
    x = torch.from_numpy(SIGN.encode_clauses(parse_sentence("b=-a; a=+1; c=+b", SIGN.group))).long()[None]
    T = x.shape[1]
    assert T == 17
    maps = hard_maps_dense(x, SIGN.vocab["[BOS]"], SIGN.vocab["[EOS]"])[0]
    assoc = torch.zeros(T, T)
    tokens = SIGN.vocab.decode(x[0])
    for i in range(T):
        partners = [j for j in range(T) if j != i and tokens[j] == tokens[i]]
        for j in partners:
            assoc[i, j] = 1 / len(partners)
    # spot checks of the expectation itself: b (pos 1) <-> b (pos 14); '=' rows spread over 2 others
    assert assoc[1, 14] == 1 and assoc[14, 1] == 1 and assoc[2, 7] == 0.5 and assoc[0].sum() == 0
    assert torch.equal(maps[0], assoc)
    bos = torch.zeros(T, T)
    bos[:, 0] = 1
    eos = torch.zeros(T, T)
    eos[:, -1] = 1
    assert torch.equal(maps[1], bos) and torch.equal(maps[2], eos)


@pytest.mark.parametrize("attention", ["lego-v0", "lego-v1"])
def test_sparse_fast_path_equals_dense_maps(attention):
    torch.manual_seed(0)
    task = LegoTask(LegoConfig(n=8, n_min=3))
    b = task.sample("test", range(6))
    x, pos = torch.from_numpy(b.tokens).long(), torch.from_numpy(b.positions.astype("int64"))
    pad = x == 0
    m = TokenClassifier(ModelConfig(n_layers=2, d_model=48, n_heads=6, attention=attention), len(task.vocab), 2,
                        special_ids=task.special_ids).eval()
    attn = m.blocks[0].attn
    h = m.embed(x)
    from legolab.models.attention import Context

    ctx = Context(x, pad)
    fast = attn(h, ctx, "blocks.0.attn")
    # dense reference: maps @ values, + ordinary heads, through the output map, + conv
    v = attn.value(h).view(6, x.shape[1], 3, attn.d_head).permute(0, 2, 1, 3)
    heads = list((hard_maps_dense(x, 1, 2, pad) @ v).unbind(1))
    if attn.n_ordinary:
        cache = m.activations(x, ["blocks.0.attn.hook_pattern"], key_padding=pad)
        p = cache["blocks.0.attn.hook_pattern"][:, 3:]
        q, k, vo = attn.qkv(h).view(6, x.shape[1], 3, attn.n_ordinary, attn.d_head).permute(2, 0, 3, 1, 4)
        heads += list((p @ vo).unbind(1))
    ref = attn.out(torch.cat(heads, -1)) + attn.conv((h * ~pad[..., None]).transpose(1, 2)).transpose(1, 2)
    valid = ~pad
    assert torch.allclose(fast[valid], ref[valid], atol=1e-5)
    # and the read-out-only path gives the same logits
    assert torch.allclose(m(x, pos, key_padding=pad), m(x, pos, key_padding=pad, readout_path=False), atol=1e-5)


def test_v0_has_no_query_or_key_parameters_and_is_smaller():
    names = {k for k, _ in TokenClassifier(ModelConfig(attention="lego-v0"), 40, 2).named_parameters()}
    assert not any("qkv" in k for k in names)
    sizes = {a: TokenClassifier(ModelConfig(attention=a), 40, 2).num_parameters() for a in ("standard", "lego-v0", "lego-v1")}
    assert sizes["lego-v0"] < sizes["lego-v1"] < sizes["standard"]


@pytest.mark.parametrize("attention", ["standard", "lego-v0", "lego-v1"])
@pytest.mark.parametrize("preset,batch,seq", [("bert-base", 64, 512), ("cpu", 3, 62), ("bert-small", 2, 2048)])
def test_flop_count_matches_the_formula(attention, preset, batch, seq):
    cfg = model_config(preset, attention, max_len=seq)
    assert count_flops(cfg, batch, seq) == analytic_flops(cfg, batch, seq)


def test_bert_base_flops_and_linear_v0():
    bert = count_flops(model_config("bert-base", "standard", 512), 64, 512)
    assert bert == pytest.approx(6.2e12, rel=0.01)
    v0 = [count_flops(model_config("bert-base", "lego-v0", 8192), 1, s) for s in (512, 2048, 8192)]
    assert v0[2] / v0[0] == pytest.approx(16, rel=1e-9)  # linear in sequence length


@pytest.mark.parametrize("attention", ["lego-v0", "lego-v1"])
def test_variants_train_a_step_and_save_load(attention, tiny_config, tmp_path):
    from legolab.training.config import load_config
    from legolab.training.runs import load_run
    from legolab.training.trainer import train

    extra = {"lego_heads": 1} if attention == "lego-v1" else {}
    cfg = load_config(tiny_config(model={"attention": attention, "identity_scaled": True, **extra},
                                  train={"steps": 4, "eval_every": 2}))
    records = train(cfg, tmp_path / "run", progress=False)
    assert len(records) == 2
    _, task, model = load_run(tmp_path / "run", "last")
    from legolab.training.data import TensorBatch
    from legolab.training.evaluate import evaluate

    # the saved weights are the evaluated ones: the same test accuracy per variable, to the bit
    test = TensorBatch.from_batch(task.sample("test", range(cfg.train.test_size)))
    assert evaluate(model, test, task.num_indices)["acc_per_index"] == records[-1]["test_acc_per_index"]
