import pytest
import torch

from legolab.models import ActivationCache, ModelConfig, TokenClassifier
from legolab.training.data import sample_depth

V, C = 40, 3


def tokens(B=4, T=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, V, (B, T), generator=g), torch.arange(1, T - 1, 5).expand(B, -1)


@pytest.mark.parametrize("cfg", [ModelConfig(n_layers=3, d_model=32, n_heads=4),
                                 ModelConfig(n_layers=3, d_model=32, n_heads=4, norm="pre"),
                                 ModelConfig(arch="albert", n_layers=3, d_model=32, n_heads=4, d_embed=16)])
def test_shapes_and_readout_path(cfg):
    torch.manual_seed(0)
    m = TokenClassifier(cfg, V, C).eval()
    x, pos = tokens()
    logits = m(x, pos)
    assert logits.shape == (4, pos.shape[1], C)
    assert m.hidden(x).shape == (4, 32, 32)
    # the last block computed at read-out tokens only equals the full computation
    full = m(x, pos, readout_path=False)
    assert torch.allclose(logits, full, atol=1e-6)


def test_albert_ties_one_set_of_layer_weights():
    small = TokenClassifier(ModelConfig(arch="albert", n_layers=2, d_model=32, n_heads=4), V, C)
    deep = TokenClassifier(ModelConfig(arch="albert", n_layers=12, d_model=32, n_heads=4), V, C)
    bert = TokenClassifier(ModelConfig(arch="bert", n_layers=12, d_model=32, n_heads=4), V, C)
    assert len(deep.blocks) == 1 and len(bert.blocks) == 12
    assert small.num_parameters() == deep.num_parameters() < bert.num_parameters()
    # the factorised embedding: E < H with a projection
    fact = TokenClassifier(ModelConfig(arch="albert", d_model=32, n_heads=4, d_embed=8), V, C)
    assert fact.embed.tok.weight.shape == (V, 8) and fact.embed.proj.weight.shape == (32, 8)


def test_depth_any_for_tied_bounded_for_untied():
    x, pos = tokens()
    albert = TokenClassifier(ModelConfig(arch="albert", n_layers=4, d_model=32, n_heads=4), V, C).eval()
    out = {d: albert(x, pos, depth=d) for d in (1, 4, 20)}
    assert not torch.allclose(out[1], out[4]) and out[20].shape == out[4].shape
    # deeper than trained applies the same block more times
    cache = albert.activations(x, ["blocks.*.hook_resid_post"], depth=6)
    assert sorted(cache) == [f"blocks.{i}.hook_resid_post" for i in range(6)]
    bert = TokenClassifier(ModelConfig(n_layers=4, d_model=32, n_heads=4), V, C)
    with pytest.raises(ValueError, match="depth 5"):
        bert(x, pos, depth=5)
    assert bert(x, pos, depth=2).shape == (4, pos.shape[1], C)


def test_stochastic_depth_sampling_is_uniform_and_stateless():
    draws = [sample_depth(0, s, 6, 12) for s in range(3000)]
    assert set(draws) == set(range(6, 13))
    assert max(draws.count(d) for d in range(6, 13)) < 1.25 * 3000 / 7
    assert draws == [sample_depth(0, s, 6, 12) for s in range(3000)]
    assert draws != [sample_depth(1, s, 6, 12) for s in range(3000)]


def test_cache_holds_only_what_was_asked_and_patterns_are_exact():
    torch.manual_seed(0)
    m = TokenClassifier(ModelConfig(n_layers=2, d_model=32, n_heads=4), V, C).eval()
    x, pos = tokens()
    out, cache = m.run_with_cache(x, ["blocks.1.attn.hook_pattern", "blocks.0.hook_resid_pre"], positions=pos)
    assert set(cache) == {"blocks.1.attn.hook_pattern", "blocks.0.hook_resid_pre"}
    p = cache["blocks.1.attn.hook_pattern"]
    assert p.shape == (4, 4, 32, 32) and torch.allclose(p.sum(-1), torch.ones(4, 4, 32))
    assert torch.allclose(out, m(x, pos), atol=1e-6)  # exact softmax path == SDPA path
    # the pattern is softmax(QK^T / sqrt(d_head)) of the layer's input
    blk = m.blocks[1]
    c2 = m.activations(x, ["blocks.0.hook_resid_post"])
    h = c2["blocks.0.hook_resid_post"]
    q, k, _ = blk.attn.qkv(h).view(4, 32, 3, 4, 8).permute(2, 0, 3, 1, 4)
    assert torch.allclose(p, (q @ k.transpose(-1, -2) / 8 ** 0.5).softmax(-1), atol=1e-6)


def test_padding_mask_makes_padded_keys_invisible():
    torch.manual_seed(0)
    m = TokenClassifier(ModelConfig(n_layers=2, d_model=32, n_heads=4), V, C).eval()
    x, pos = tokens(B=1, T=20)
    padded = torch.cat([x, torch.zeros(1, 7, dtype=x.dtype)], 1)
    pad_mask = padded == 0
    a = m(x, pos[:, :3])
    b = m(padded, pos[:, :3], key_padding=pad_mask)
    assert torch.allclose(a, b, atol=1e-5)


def test_identity_scaled_attention_starts_as_the_plain_model():
    torch.manual_seed(0)
    plain = TokenClassifier(ModelConfig(n_layers=2, d_model=32, n_heads=4, attn_impl="math"), V, C).eval()
    torch.manual_seed(0)
    scaled = TokenClassifier(ModelConfig(n_layers=2, d_model=32, n_heads=4, identity_scaled=True), V, C).eval()
    missing = scaled.load_state_dict(plain.state_dict(), strict=False).missing_keys
    assert sorted(missing) == sorted(f"blocks.{i}.attn.{p}" for i in range(2) for p in ("id_qk", "id_vo"))
    x, pos = tokens()
    # the same (math) kernel on both sides: a = b = 0 changes no bit
    assert torch.equal(scaled(x, pos), plain(x, pos))
    with torch.no_grad():
        scaled.blocks[0].attn.id_qk.fill_(0.5)
    assert not torch.allclose(scaled(x, pos), plain(x, pos))


def test_auto_kernel_on_a_cpu_trains_with_matmuls_and_infers_with_sdpa(monkeypatch):
    """Training reads the scores (guidance), which SDPA would compute a second time; fp32 inference
    is faster fused. Observing the pattern through a hook takes the same kernel as not observing."""
    import torch.nn.functional as F

    fused, real = [], F.scaled_dot_product_attention
    monkeypatch.setattr(F, "scaled_dot_product_attention", lambda *a, **k: fused.append(1) or real(*a, **k))
    torch.manual_seed(0)
    m = TokenClassifier(ModelConfig(n_layers=2, d_model=32, n_heads=4), V, C).eval()
    x, pos = tokens()
    trained = m(x, pos)
    assert not fused
    cache = ActivationCache(["blocks.*.attn.hook_attn_scores"])
    assert torch.equal(m(x, pos, cache=cache), trained) and len(cache) == 2 and not fused
    with torch.no_grad():
        inferred = m(x, pos)
        assert len(fused) == 2
        observed = m(x, pos, cache=ActivationCache(["blocks.*.attn.hook_pattern"]))
    assert torch.equal(observed, inferred) and len(fused) == 4
    assert torch.allclose(inferred, trained, atol=1e-5)


@pytest.mark.parametrize("key,value,message", [
    ("arch", "gpt", "model.arch"), ("n_heads", 5, "model.n_heads: must divide"), ("norm", "mid", "model.norm"),
    ("dropout", 1.0, "model.dropout"), ("d_embed", 16, "ALBERT"), ("attention", "linear", "model.attention"),
])
def test_invalid_model_configs(key, value, message):
    from legolab.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        ModelConfig(**{key: value}).validate()


def test_hooks_observe_without_changing_the_computed_path():
    torch.manual_seed(0)
    m = TokenClassifier(ModelConfig(n_layers=3, d_model=32, n_heads=4, norm="pre"), V, C).eval()
    x, pos = tokens()
    plain = m(x, pos)
    # an empty cache, or hooks of earlier blocks, keep the read-out-only last block: bit-identical
    assert torch.equal(m(x, pos, cache=ActivationCache([])), plain)
    _, cache = m.run_with_cache(x, ["blocks.0.attn.hook_pattern", "blocks.1.hook_resid_post"], positions=pos)
    assert torch.equal(_, plain) and set(cache) == {"blocks.0.attn.hook_pattern", "blocks.1.hook_resid_post"}
    # a hook of the last block needs all of its tokens: full pattern, same logits up to rounding
    logits, cache = m.run_with_cache(x, ["blocks.2.attn.hook_pattern"], positions=pos)
    assert cache["blocks.2.attn.hook_pattern"].shape[-2] == x.shape[1]
    assert torch.allclose(logits, plain, atol=1e-6)


def test_embed_std_sets_only_the_embedding_scale():
    """model.embed_std: N(0, embed_std) token and position tables; every other weight is the
    default initialisation's, draw for draw."""
    torch.manual_seed(0)
    plain = TokenClassifier(ModelConfig(n_layers=2, d_model=64, n_heads=4), 300, 2)
    torch.manual_seed(0)
    wide = TokenClassifier(ModelConfig(n_layers=2, d_model=64, n_heads=4, embed_std=1.0), 300, 2)
    for (name, a), (_, b) in zip(plain.named_parameters(), wide.named_parameters()):
        if name.endswith(("embed.tok.weight", "embed.pos.weight")):
            assert 0.9 < b.std().item() < 1.1 and a.std().item() < 0.03, name
        else:
            assert torch.equal(a, b), name
