"""The transformer block of ``transformer.py`` written with ``flax.linen``.

Same parameters (names and shapes) and the same parameter-free core
(:func:`transformer.attend`), so a linen model can load the nnx block's weights
(``nnx.to_pure_dict(nnx.state(block))``) and compute the same outputs; the positional
encoding enters through the same arguments (RoPE tables, logit bias, explicit
positions, KV cache and its write slots). ``tests/test_examples.py`` checks linen == nnx.
"""

from __future__ import annotations

import flax.linen as nn
import jax
from transformer import Config, attend


class Attention(nn.Module):
    """Causal multi-head attention (see ``transformer.Attention``)."""

    config: Config

    @nn.compact
    def __call__(self, x, *, rope, bias, mask, cache, slots):
        c = self.config
        qkv = nn.DenseGeneral((3, c.num_heads, c.head_dim), use_bias=False, name="qkv")(
            x
        )
        out, cache = attend(
            qkv[:, :, 0],
            qkv[:, :, 1],
            qkv[:, :, 2],
            rope=rope,
            rope_layout=c.rope_layout,
            bias=bias,
            mask=mask,
            cache=cache,
            slots=slots,
        )
        return nn.DenseGeneral(c.d_model, axis=(-2, -1), name="out")(out), cache


class Block(nn.Module):
    """Pre-norm block: attention and a GELU MLP, each residual (``transformer.Block``)."""

    config: Config

    @nn.compact
    def __call__(self, x, *, rope, bias, mask, cache, slots):
        y, cache = Attention(self.config, name="attention")(
            nn.LayerNorm(name="norm1")(x),
            rope=rope,
            bias=bias,
            mask=mask,
            cache=cache,
            slots=slots,
        )
        x = x + y
        h = nn.Dense(self.config.d_ff, name="mlp_in")(nn.LayerNorm(name="norm2")(x))
        x = x + nn.Dense(self.config.d_model, name="mlp_out")(jax.nn.gelu(h))
        return x, cache
