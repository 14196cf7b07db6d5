"""TransformerBlock: parity with PyTorch's encoder/decoder layers, TinyLM unchanged, errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from checking import checked_names
from selfattn.block import BlockConfig, TransformerBlock
from selfattn.feedforward import SwiGLU, swiglu_width
from selfattn.kv_cache import KVCache, RollingKVCache
from selfattn.language_model import LMConfig, TinyLM
from selfattn.masks import key_padding_to_attention_mask, padding_mask
from selfattn.normalization import RMSNorm

D, H, FF = 16, 4, 24


def _encoder(norm_first: bool, activation: str, dtype=torch.float64) -> nn.TransformerEncoderLayer:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(D, H, dim_feedforward=FF, dropout=0.1,
                                       activation=activation, batch_first=True,
                                       norm_first=norm_first)
    with torch.no_grad():  # non-trivial LayerNorm parameters, so a mix-up of norms shows
        for p in layer.parameters():
            if p.ndim == 1:
                p.add_(0.3 * torch.randn_like(p))
    return layer.to(dtype).eval()


def _decoder(norm_first: bool, activation: str, dtype=torch.float64) -> nn.TransformerDecoderLayer:
    torch.manual_seed(1)
    layer = nn.TransformerDecoderLayer(D, H, dim_feedforward=FF, dropout=0.1,
                                       activation=activation, batch_first=True,
                                       norm_first=norm_first)
    with torch.no_grad():
        for p in layer.parameters():
            if p.ndim == 1:
                p.add_(0.3 * torch.randn_like(p))
    return layer.to(dtype).eval()


@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize("activation", ["gelu", "relu"])
@pytest.mark.parametrize("causal", [False, True])
def test_encoder_layer_parity(norm_first: bool, activation: str, causal: bool) -> None:
    layer = _encoder(norm_first, activation)
    block = TransformerBlock.from_torch(layer, causal=causal).eval()
    assert block.config.norm_first is norm_first and block.config.activation == activation
    g = torch.Generator().manual_seed(2)
    x = torch.randn(3, 7, D, generator=g, dtype=torch.float64)
    pad = padding_mask([7, 5, 3], 7, like=x)  # (3, 7) True = real token
    src_mask = torch.ones(7, 7, dtype=torch.bool).triu(1)  # torch: True = blocked
    ref = layer(x, src_mask=src_mask if causal else None, src_key_padding_mask=~pad,
                is_causal=causal)
    ours = block(x, mask=key_padding_to_attention_mask(pad))
    assert torch.allclose(ours, ref, atol=1e-6, rtol=0)
    # without any mask too, and in float32 to 1e-5
    layer32 = _encoder(norm_first, activation, torch.float32)
    block32 = TransformerBlock.from_torch(layer32).eval()
    x32 = x.float()
    assert torch.allclose(block32(x32), layer32(x32), atol=1e-5, rtol=0)


@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize("activation", ["gelu", "relu"])
def test_decoder_layer_parity(norm_first: bool, activation: str) -> None:
    layer = _decoder(norm_first, activation)
    block = TransformerBlock.from_torch(layer, causal=True).eval()
    assert block.config.cross_attention
    g = torch.Generator().manual_seed(3)
    tgt = torch.randn(2, 5, D, generator=g, dtype=torch.float64)  # 5 target tokens
    memory = torch.randn(2, 9, D, generator=g, dtype=torch.float64)  # 9 source tokens
    src_pad = padding_mask([9, 6], 9, like=memory)  # (2, 9)
    tgt_mask = nn.Transformer.generate_square_subsequent_mask(5, dtype=torch.float64)
    ref = layer(tgt, memory, tgt_mask=tgt_mask, tgt_is_causal=True,
                memory_key_padding_mask=~src_pad)
    ours = block(tgt, memory, memory_mask=key_padding_to_attention_mask(src_pad))
    assert ours.shape == (2, 5, D)
    assert torch.allclose(ours, ref, atol=1e-6, rtol=0)
    # the source padding matters: changing padded memory rows changes nothing
    memory2 = memory.clone()
    memory2[1, 6:] = 100.0
    ours2 = block(tgt, memory2, memory_mask=key_padding_to_attention_mask(src_pad))
    assert torch.allclose(ours, ours2, atol=1e-12)
    # ... but without the mask it does
    assert not torch.allclose(block(tgt, memory), block(tgt, memory2))


def test_block_without_copy_differs() -> None:
    """The parity test can fail: a fresh block does not match the torch layer."""
    layer = _encoder(True, "gelu")
    fresh = TransformerBlock(BlockConfig(D, H, d_ff=FF)).double().eval()
    x = torch.randn(2, 4, D, dtype=torch.float64)
    assert not torch.allclose(fresh(x), layer(x), atol=1e-3)


def test_post_ln_output_is_normalised_pre_ln_is_not() -> None:
    torch.manual_seed(0)
    z = torch.randn(2, 6, D, dtype=torch.float64)
    # every token's mean is exactly 3 (unseeded, 3 + 5 z had token means down to 0.43)
    x = 3.0 + 5.0 * (z - z.mean(-1, keepdim=True))
    post = TransformerBlock(BlockConfig(D, H, norm_first=False)).double()
    pre = TransformerBlock(BlockConfig(D, H, norm_first=True)).double()
    y = post(x)  # LayerNorm (weight 1, bias 0 at init) is the last operation
    assert torch.allclose(y.mean(-1), torch.zeros(2, 6, dtype=torch.float64), atol=1e-10)
    assert torch.allclose(y.var(-1, unbiased=False), torch.ones(2, 6, dtype=torch.float64),
                          atol=1e-3)
    assert pre(x).mean(-1).abs().min() > 0.5  # the stream keeps its offset of 3


def test_causal_block_kv_cache_equals_full() -> None:
    torch.manual_seed(0)
    block = TransformerBlock(BlockConfig(D, H, causal=True)).double().eval()
    x = torch.randn(2, 6, D, dtype=torch.float64)
    full = block(x)
    cache = KVCache()
    steps = [block(x[:, t : t + 1], kv_cache=cache) for t in range(6)]
    assert torch.allclose(torch.cat(steps, 1), full, atol=1e-12)
    # causal: changing a later token leaves earlier outputs unchanged
    x2 = x.clone()
    x2[:, 4:] += 1.0
    assert torch.allclose(block(x2)[:, :4], full[:, :4], atol=1e-12)


def test_windowed_block_rolling_cache_equals_full() -> None:
    torch.manual_seed(1)
    block = TransformerBlock(BlockConfig(D, H, causal=True, window=3)).double().eval()
    assert block.attn.window == 3
    x = torch.randn(2, 10, D, dtype=torch.float64)
    full = block(x)
    cache = RollingKVCache(3)
    steps = [block(x[:, t : t + 1], kv_cache=cache) for t in range(10)]
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=0, atol=1e-12)
    assert len(cache) == 3
    # the window: an input more than 2 tokens back leaves an output unchanged
    x2 = x.clone()
    x2[:, 5] += torch.randn(D, dtype=torch.float64)  # not a constant: LayerNorm removes those
    out2 = block(x2)
    torch.testing.assert_close(out2[:, 8:], full[:, 8:], rtol=0, atol=0)
    assert all((out2[:, t] - full[:, t]).abs().max() > 1e-6 for t in (5, 6, 7))
    with pytest.raises(ValueError, match="window: a sliding window looks back only"):
        BlockConfig(D, H, window=3)
    with pytest.raises(ValueError, match="window: expected a positive int, got 0"):
        BlockConfig(D, H, causal=True, window=0)


# reference logits of TinyLM saved before TransformerBlock moved into selfattn.block
_REF = {
    "learned": (
        LMConfig(vocab_size=16, seq_len=12, d_model=32, num_heads=2, num_layers=2),
        [-0.45573949813842773, -0.03806938976049423, 0.8217848539352417, -0.34510472416877747],
        [1.3597831726074219, -0.2639106512069702, 0.9238356351852417],
        26.576261904090643, 169.54027711600065, 38,
    ),
    "sinusoidal": (
        LMConfig(vocab_size=11, seq_len=9, d_model=24, num_heads=3, num_layers=3, d_ff=40,
                 positional="sinusoidal", dropout=0.1),
        [0.4411073625087738, -0.7112752199172974, -0.31502121686935425, 0.322989821434021],
        [-0.1340409815311432, 0.12760880589485168, -0.12025858461856842],
        -19.58352101407945, 97.0262740533799, 53,
    ),
}


@pytest.mark.parametrize("name", sorted(_REF))
def test_tinylm_logits_unchanged(name: str) -> None:
    cfg, first, last, total, abs_total, n_keys = _REF[name]
    torch.manual_seed(1234)
    model = TinyLM(cfg).eval()
    idx = torch.randint(0, cfg.vocab_size, (2, cfg.seq_len),
                        generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        logits = model(idx).double().numpy()
    np.testing.assert_allclose(logits[0, 0, :4], first, atol=1e-6)
    np.testing.assert_allclose(logits[1, -1, -3:], last, atol=1e-6)
    assert abs(logits.sum() - total) < 1e-4 and abs(np.abs(logits).sum() - abs_total) < 1e-4
    keys = list(model.state_dict())
    assert len(keys) == n_keys
    assert "blocks.0.mlp.2.weight" in keys and "blocks.0.ln1.weight" in keys
    assert isinstance(model.blocks[0], TransformerBlock)
    assert model.blocks[0].config == cfg.block_config()


def test_config_and_input_errors() -> None:
    with pytest.raises(ValueError, match="num_heads"):
        BlockConfig(10, 3)
    with pytest.raises(ValueError, match="activation"):
        BlockConfig(8, 2, activation="tanh")
    with pytest.raises(ValueError, match="dropout"):
        BlockConfig(8, 2, dropout=1.0)
    with pytest.raises(TypeError, match="norm_first"):
        BlockConfig(8, 2, norm_first=1)
    with pytest.raises(TypeError, match="config"):
        TransformerBlock({"d_model": 8})
    block = TransformerBlock(BlockConfig(8, 2))
    with pytest.raises(ValueError, match=r"last dimension 8.*\(2, 3, 5\)"):
        block(torch.randn(2, 3, 5))
    with pytest.raises(ValueError, match="cross_attention=False"):
        block(torch.randn(2, 3, 8), torch.randn(2, 4, 8))
    dec = TransformerBlock(BlockConfig(8, 2, cross_attention=True))
    with pytest.raises(ValueError, match="memory.*None"):
        dec(torch.randn(2, 3, 8))
    with pytest.raises(ValueError, match="memory"):
        dec(torch.randn(2, 3, 8), torch.randn(2, 4, 6))
    with pytest.raises(ValueError, match="norm_first"):
        TransformerBlock(BlockConfig(D, H, d_ff=FF, norm_first=False)).copy_from_torch(
            _encoder(True, "gelu", torch.float32))
    with pytest.raises(ValueError, match="cross_attention"):
        TransformerBlock(BlockConfig(D, H, d_ff=FF)).copy_from_torch(
            _decoder(True, "gelu", torch.float32))
    with pytest.raises(TypeError, match="layer"):
        TransformerBlock.from_torch(nn.Linear(2, 2))


def test_each_input_is_checked_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The block checks x and memory where they come in; its attention layers and the
    attention function do not check them (or what is computed from them) again, and a
    TinyLM checks its token ids only. What remains is one check of each attention's
    result ("query, key": a score that overflowed), which depends on the numbers."""
    seen = checked_names(monkeypatch)
    torch.manual_seed(0)
    block = TransformerBlock(BlockConfig(d_model=8, num_heads=2, causal=True,
                                         cross_attention=True))
    pad = key_padding_to_attention_mask(padding_mask([4, 3], 4))
    block(torch.randn(2, 3, 8), torch.randn(2, 4, 8), memory_mask=pad, kv_cache=KVCache())
    assert seen == ["x", "memory", "query, key", "query, key"]  # self-, cross-attention
    seen.clear()
    model = TinyLM(LMConfig(vocab_size=5, seq_len=4, d_model=8, num_heads=2, num_kv_heads=1,
                            positional="alibi"))
    model(torch.zeros(1, 4, dtype=torch.long))
    assert seen == ["query, key"] * model.config.num_layers


@pytest.mark.parametrize("norm_first", [True, False])
def test_attention_only_block_is_the_attention_sublayer_alone(norm_first: bool) -> None:
    """attention_only=True: x + Attn(LN1(x)) (pre-LN) or LN1(x + Attn(x)) (post-LN), no MLP."""
    torch.manual_seed(0)
    block = TransformerBlock(BlockConfig(D, H, causal=True, norm_first=norm_first,
                                         attention_only=True)).double().eval()
    assert not hasattr(block, "mlp") and not hasattr(block, "ln2")
    x = torch.randn(2, 5, D, dtype=torch.float64)
    with torch.no_grad():
        if norm_first:
            expected = x + block.attn(block.ln1(x))[0]
        else:
            expected = block.ln1(x + block.attn(x)[0])
        assert torch.allclose(block(x), expected, atol=1e-12)
    # the same seed gives the same attention weights as a block with an MLP: only the
    # MLP (and LN2) are left out, after everything else is created
    torch.manual_seed(0)
    full = TransformerBlock(BlockConfig(D, H, causal=True, norm_first=norm_first))
    assert torch.equal(full.attn.w_q.weight.double(), block.attn.w_q.weight)
    with pytest.raises(TypeError, match="attention_only"):
        BlockConfig(D, H, attention_only=1)
    with pytest.raises(ValueError, match="attention-only"):
        TransformerBlock(BlockConfig(D, H, d_ff=FF, attention_only=True)).copy_from_torch(
            _encoder(True, "gelu", torch.float32))


# ---------------------------------------------------------------- RMSNorm, SwiGLU, QK-norm, cap


def test_rmsnorm_swiglu_block_equals_torch_rmsnorm_and_the_swiglu_formula() -> None:
    """Pre-norm block with norm="rmsnorm", activation="swiglu": x + attn(RMSNorm_1(x)), then
    + W_2(SiLU(h W_1) ⊙ h W_3) with h = RMSNorm_2 of that, the norms torch.nn.RMSNorm."""
    torch.manual_seed(0)
    block = TransformerBlock(BlockConfig(D, H, norm="rmsnorm", activation="swiglu",
                                         causal=True)).double().eval()
    refs = []
    for ours in (block.ln1, block.ln2):
        ref = nn.RMSNorm(D, eps=1e-5).double()
        with torch.no_grad():
            ours.weight.copy_(1.0 + 0.3 * torch.randn(D, dtype=torch.float64))
            ref.weight.copy_(ours.weight)
        refs.append(ref)
    x = torch.randn(2, 6, D, dtype=torch.float64)
    with torch.no_grad():
        mid = x + block.attn(refs[0](x))[0]
        h = refs[1](mid)
        u = h @ block.mlp.w_1.weight.T
        gated = (u * torch.sigmoid(u)) * (h @ block.mlp.w_3.weight.T)  # SiLU(h W_1) ⊙ h W_3
        expected = mid + gated @ block.mlp.w_2.weight.T
        assert torch.allclose(block(x), expected, atol=1e-12, rtol=0)
        # LayerNorm/GELU with the same attention weights gives other numbers
        plain = TransformerBlock(BlockConfig(D, H, causal=True)).double().eval()
        plain.attn.load_state_dict(block.attn.state_dict())
        assert (plain(x) - block(x)).abs().max() > 1e-2


def test_post_norm_rmsnorm_output_has_rms_one() -> None:
    torch.manual_seed(1)
    block = TransformerBlock(BlockConfig(D, H, norm_first=False, norm="rmsnorm")).double()
    y = block(3.0 + torch.randn(2, 5, D, dtype=torch.float64))
    rms = y.pow(2).mean(-1).sqrt()
    assert torch.allclose(rms, torch.ones_like(rms), atol=1e-5)  # the last op is an RMSNorm
    assert y.mean(-1).abs().max() > 1e-3  # ... which does not centre: not a LayerNorm


def test_modern_block_parameter_counts() -> None:
    d = 32
    classic = TransformerBlock(BlockConfig(d, 4))
    modern = TransformerBlock(BlockConfig(d, 4, norm="rmsnorm", activation="swiglu"))
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    h = swiglu_width(d)
    assert modern.config.ff_dim == h == 85 and modern.mlp.d_ff == h
    assert count(classic.mlp) == 8 * d * d + 5 * d and count(modern.mlp) == 3 * d * h
    assert count(modern.ln1) == d and count(classic.ln1) == 2 * d
    assert count(modern) == count(classic.attn) + 3 * d * h + 2 * d
    assert BlockConfig(d, 4, activation="swiglu", d_ff=64).ff_dim == 64  # an explicit d_ff wins


def test_qk_norm_and_softcap_reach_every_attention_of_the_block() -> None:
    block = TransformerBlock(BlockConfig(D, H, cross_attention=True, qk_norm=True, softcap=7.0))
    for attn in (block.attn, block.cross_attn):
        assert attn.qk_norm and attn.softcap == 7.0 and hasattr(attn, "q_norm")
    plain = TransformerBlock(BlockConfig(D, H, cross_attention=True))
    assert not plain.attn.qk_norm and plain.cross_attn.softcap is None
    assert not BlockConfig(D, H, softcap=7.0).plain_attention
    assert BlockConfig(D, H).plain_attention


def test_modern_block_errors() -> None:
    with pytest.raises(ValueError, match=r"norm: expected one of \('layernorm', 'rmsnorm'\)"):
        BlockConfig(8, 2, norm="batchnorm")
    with pytest.raises(ValueError, match=r"activation.*'swiglu'.*'silu'"):
        BlockConfig(8, 2, activation="silu")
    with pytest.raises(TypeError, match="qk_norm: expected a bool"):
        BlockConfig(8, 2, qk_norm="yes")
    with pytest.raises(ValueError, match="softcap"):
        BlockConfig(8, 2, softcap=-3.0)
    layer = _encoder(True, "gelu", torch.float32)
    with pytest.raises(ValueError, match="its norm is 'layernorm' but this block has norm="):
        TransformerBlock(BlockConfig(D, H, d_ff=FF, norm="rmsnorm")).copy_from_torch(layer)
    with pytest.raises(ValueError, match="activation"):
        TransformerBlock(BlockConfig(D, H, d_ff=FF, activation="swiglu")).copy_from_torch(layer)
    with pytest.raises(ValueError, match="qk_norm=True"):
        TransformerBlock(BlockConfig(D, H, d_ff=FF, qk_norm=True)).copy_from_torch(layer)


def test_lmconfig_passes_the_options_to_every_block_and_the_final_norm() -> None:
    cfg = LMConfig(vocab_size=13, seq_len=8, d_model=D, num_heads=H, num_layers=2,
                   norm="rmsnorm", activation="swiglu", qk_norm=True, softcap=20.0)
    assert cfg.ff_dim == swiglu_width(D)
    torch.manual_seed(2)
    model = TinyLM(cfg).double().eval()
    assert isinstance(model.ln_f, RMSNorm)
    for blk in model.blocks:
        c = blk.config
        assert (c.norm, c.activation, c.qk_norm, c.softcap) == ("rmsnorm", "swiglu", True, 20.0)
        assert isinstance(blk.ln1, RMSNorm) and isinstance(blk.mlp, SwiGLU)
    d, h = D, swiglu_width(D)
    per_block = (4 * d * d + 4 * d + 2 * (d // H)) + 3 * d * h + 2 * d  # attn (+ gains), MLP, norms
    assert model.num_parameters() == 13 * d + 8 * d + 2 * per_block + d + d * 13 + 13
    idx = torch.randint(0, 13, (2, 8), generator=torch.Generator().manual_seed(3))
    full = model(idx)
    caches = model.new_caches()
    steps = [model(idx[:, t : t + 1], caches) for t in range(8)]
    assert torch.allclose(torch.cat(steps, 1), full, atol=1e-12)
    default = LMConfig(vocab_size=13, seq_len=8)
    assert (default.norm, default.activation, default.qk_norm, default.softcap) == (
        "layernorm", "gelu", False, None)
    with pytest.raises(ValueError, match="norm"):
        LMConfig(vocab_size=13, seq_len=8, norm="rms")
    with pytest.raises(ValueError, match="activation"):
        LMConfig(vocab_size=13, seq_len=8, activation="swish")
    with pytest.raises(TypeError, match="softcap"):
        LMConfig(vocab_size=13, seq_len=8, softcap="30")


@pytest.mark.parametrize(("option", "value"), [("qk_norm", True), ("softcap", 30.0)])
def test_latent_attention_refuses_the_stable_logit_options(option: str, value: object) -> None:
    """MLA has no QK-norm or soft-cap here: asking for both is a clear error, not ignored."""
    with pytest.raises(ValueError, match=f"{option}: multi-head latent attention"):
        BlockConfig(D, H, causal=True, latent_dim=8, **{option: value})
    BlockConfig(D, H, causal=True, latent_dim=8)  # without them it builds
