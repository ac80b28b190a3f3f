"""Port a Hugging Face checkpoint to a Flax nnx decoder whose RoPE is flax_posenc's.

Reads a ``config.json`` and ``model.safetensors`` (the files ``save_pretrained``
writes) and rebuilds the model in a few dozen lines of nnx: token embedding, pre-norm
blocks (RMSNorm, grouped-query attention, SwiGLU MLP), final norm, LM head. Position
enters only through ``flax_posenc``::

    rope = fp.rope_config_from_hf(config_json)   # theta, rotary_dim, layout, scaling
    q = fp.apply_rope(q, positions, rope)       # q, k: [B, L, N, H]

Three families share the code: Llama, GLM (partial rotary 0.5 with interleaved pairs,
q/k/v biases, fused gate/up projection) and Phi-3 (fused qkv and gate/up, LongRoPE).
Fused projections are split into Llama's names when the weights are loaded, so one
name mapping serves all three.

For each checkpoint (by default all of ``tests/fixtures/checkpoints``, tiny random
models made by ``tools/make_hf_checkpoints.py``) it compares, against the
outputs transformers computed (``golden.json``), the logits of a forward pass on the
prompt and the tokens of greedy decoding (full recomputation per step), prints a table
and exits non-zero on any mismatch.

Run: ``python examples/port_hf.py`` (``--checkpoint DIR`` for one model; repeatable).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import sys
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import safetensors.numpy
from flax import nnx

import flax_posenc as fp

CHECKPOINTS = pathlib.Path(__file__).parents[1] / "tests" / "fixtures" / "checkpoints"
FAMILIES = ("llama", "glm", "phi3")
# float32 end to end on both sides; the two differ only in summation order (XLA vs
# PyTorch kernels), which moves these logits (std 1, at most ~4) by ~2e-6. A RoPE
# mistake (layout, frequencies, a position off by one) moves them by 1e-2 or more.
LOGITS_ATOL = 1e-4


@dataclasses.dataclass(frozen=True)
class Config:
    """The decoder's hyper-parameters, read from a Hugging Face ``config.json``."""

    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    attention_bias: bool
    tie_word_embeddings: bool
    rope: fp.RopeConfig

    @classmethod
    def from_hf(cls, hf: dict[str, Any]) -> Config:
        """The fields the three families read (transformers' names and defaults)."""
        model_type = hf.get("model_type")
        if model_type not in FAMILIES:
            raise ValueError(
                f"`model_type` must be one of {', '.join(FAMILIES)}, "
                f"got {model_type!r}."
            )
        unsupported = {
            "hidden_act": hf.get("hidden_act", "silu") != "silu",
            "mlp_bias": bool(hf.get("mlp_bias")),
            "sliding_window": hf.get("sliding_window") is not None,
        }
        if any(unsupported.values()):
            names = [name for name, bad in unsupported.items() if bad]
            raise ValueError(f"This port does not implement {names} of the config.")
        num_heads = hf["num_attention_heads"]
        return cls(
            model_type=model_type,
            vocab_size=hf["vocab_size"],
            hidden_size=hf["hidden_size"],
            intermediate_size=hf["intermediate_size"],
            num_layers=hf["num_hidden_layers"],
            num_heads=num_heads,
            num_kv_heads=hf.get("num_key_value_heads") or num_heads,
            head_dim=hf.get("head_dim") or hf["hidden_size"] // num_heads,
            rms_norm_eps=hf["rms_norm_eps"],
            attention_bias=bool(hf.get("attention_bias", False)),
            tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
            rope=fp.rope_config_from_hf(hf),
        )


class RMSNorm(nnx.Module):
    """``x / sqrt(mean(x^2) + eps) * weight`` over the last axis of ``x [B, L, D]``,
    computed in float32."""

    def __init__(self, dim: int, eps: float):
        self.eps = eps
        self.weight = nnx.Param(jnp.ones((dim,)))

    def __call__(self, x: jax.Array) -> jax.Array:
        xf = x.astype(jnp.float32)
        xf = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + self.eps)
        return self.weight[None, None, :] * xf.astype(x.dtype)


class Attention(nnx.Module):
    """Causal grouped-query attention: ``N`` query heads share ``K`` key/value heads
    (query head ``n`` reads key/value head ``n // (N / K)``, as HF's ``repeat_kv``)."""

    def __init__(self, config: Config, *, rngs: nnx.Rngs):
        d, h, bias = config.hidden_size, config.head_dim, config.attention_bias
        self.num_heads = config.num_heads
        self.num_kv_heads = config.num_kv_heads
        self.head_dim = h
        self.rope = config.rope
        self.q_proj = nnx.Linear(d, config.num_heads * h, use_bias=bias, rngs=rngs)
        self.k_proj = nnx.Linear(d, config.num_kv_heads * h, use_bias=bias, rngs=rngs)
        self.v_proj = nnx.Linear(d, config.num_kv_heads * h, use_bias=bias, rngs=rngs)
        self.o_proj = nnx.Linear(config.num_heads * h, d, use_bias=False, rngs=rngs)

    def __call__(
        self, x: jax.Array, positions: jax.Array, seq_len: jax.Array | None
    ) -> jax.Array:
        """``x [B, L, D]`` at ``positions int [B, L]`` -> ``[B, L, D]``."""
        batch, length, _ = x.shape
        q = self.q_proj(x).reshape(batch, length, self.num_heads, self.head_dim)
        k = self.k_proj(x).reshape(batch, length, self.num_kv_heads, self.head_dim)
        v = self.v_proj(x).reshape(batch, length, self.num_kv_heads, self.head_dim)
        # The only place position enters the model. Dynamic NTK and LongRoPE pick
        # their frequencies from seq_len (None: max(positions) + 1, as HF does).
        q = fp.apply_rope(q, positions, self.rope, seq_len=seq_len)
        k = fp.apply_rope(k, positions, self.rope, seq_len=seq_len)
        out = jax.nn.dot_product_attention(q, k, v, is_causal=True)  # GQA built in
        return self.o_proj(out.reshape(batch, length, -1))


class MLP(nnx.Module):
    """SwiGLU: ``down(silu(gate(x)) * up(x))``."""

    def __init__(self, config: Config, *, rngs: nnx.Rngs):
        d, i = config.hidden_size, config.intermediate_size
        self.gate_proj = nnx.Linear(d, i, use_bias=False, rngs=rngs)
        self.up_proj = nnx.Linear(d, i, use_bias=False, rngs=rngs)
        self.down_proj = nnx.Linear(i, d, use_bias=False, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.down_proj(jax.nn.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nnx.Module):
    """Pre-norm block: ``x + attn(norm(x))``, then ``x + mlp(norm(x))``."""

    def __init__(self, config: Config, *, rngs: nnx.Rngs):
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = Attention(config, rngs=rngs)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = MLP(config, rngs=rngs)

    def __call__(self, x, positions, seq_len):
        x = x + self.self_attn(self.input_layernorm(x), positions, seq_len)
        return x + self.mlp(self.post_attention_layernorm(x))


class Decoder(nnx.Module):
    """``tokens int [B, L]`` at ``positions int [B, L]`` -> logits ``[B, L, V]``.

    ``seq_len`` is the length of the sequence the frequencies of dynamic NTK and
    LongRoPE are chosen for; None means ``max(positions) + 1``.

    Attribute names follow the HF modules (``layers[i].self_attn.q_proj`` ...) so the
    weight mapping in :func:`load_hf_weights` reads one-to-one.
    """

    def __init__(self, config: Config, *, rngs: nnx.Rngs):
        self.config = config
        self.embed_tokens = nnx.Embed(config.vocab_size, config.hidden_size, rngs=rngs)
        self.layers = nnx.List(
            [Block(config, rngs=rngs) for _ in range(config.num_layers)]
        )
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.lm_head = nnx.data(
            None
            if config.tie_word_embeddings
            else nnx.Linear(
                config.hidden_size, config.vocab_size, use_bias=False, rngs=rngs
            )
        )

    def __call__(
        self, tokens: jax.Array, positions: jax.Array, seq_len: jax.Array | None = None
    ) -> jax.Array:
        x = self.embed_tokens(tokens)
        for layer in self.layers:
            x = layer(x, positions, seq_len)
        x = self.norm(x)
        if self.lm_head is None:  # tied: the embedding matrix is the LM head
            return self.embed_tokens.attend(x)
        return self.lm_head(x)


def unfuse(tensors: dict[str, np.ndarray], config: Config) -> dict[str, np.ndarray]:
    """Splits Phi-3's ``qkv_proj`` and GLM/Phi-3's ``gate_up_proj`` into Llama's
    ``q/k/v_proj`` and ``gate/up_proj`` (rows of HF's ``[out, in]`` weights)."""
    tensors = dict(tensors)
    q_rows = config.num_heads * config.head_dim
    kv_rows = config.num_kv_heads * config.head_dim
    for name in [n for n in tensors if n.endswith(".qkv_proj.weight")]:
        prefix = name.removesuffix("qkv_proj.weight")
        q, k, v = np.split(tensors.pop(name), [q_rows, q_rows + kv_rows])
        tensors[f"{prefix}q_proj.weight"] = q
        tensors[f"{prefix}k_proj.weight"] = k
        tensors[f"{prefix}v_proj.weight"] = v
    for name in [n for n in tensors if n.endswith(".gate_up_proj.weight")]:
        prefix = name.removesuffix("gate_up_proj.weight")
        gate, up = np.split(tensors.pop(name), 2)  # HF: gate, up = chunk(2)
        tensors[f"{prefix}gate_proj.weight"] = gate
        tensors[f"{prefix}up_proj.weight"] = up
    return tensors


def load_hf_weights(model: Decoder, tensors: dict[str, np.ndarray]) -> None:
    """Sets every parameter of ``model`` from HF tensors (``model.layers.0.self_attn.
    q_proj.weight`` ...). ``nn.Linear`` stores ``[out, in]``, ``nnx.Linear``'s kernel
    is ``[in, out]``: weights are transposed. Raises on a missing, left-over or
    misshapen tensor, and if a parameter is left unset."""
    tensors = unfuse(tensors, model.config)
    assigned = []

    def assign(variable: nnx.Variable, name: str, transpose: bool = False) -> None:
        if name not in tensors:
            raise ValueError(f"The checkpoint has no tensor {name!r}.")
        value = tensors.pop(name)
        value = value.T if transpose else value
        if value.shape != variable.shape:
            raise ValueError(
                f"{name}: expected shape {variable.shape}, got {value.shape}."
            )
        value = jnp.asarray(value, variable.dtype)
        if hasattr(variable, "set_value"):
            variable.set_value(value)
        else:  # flax 0.12.0 has no set_value: the abstract value goes through `.value`
            variable.value = value
        assigned.append(name)

    def linear(module: nnx.Linear, name: str) -> None:
        assign(module.kernel, f"{name}.weight", transpose=True)
        if module.bias is not None:
            assign(module.bias, f"{name}.bias")

    assign(model.embed_tokens.embedding, "model.embed_tokens.weight")
    for i, layer in enumerate(model.layers):
        prefix = f"model.layers.{i}"
        assign(layer.input_layernorm.weight, f"{prefix}.input_layernorm.weight")
        assign(
            layer.post_attention_layernorm.weight,
            f"{prefix}.post_attention_layernorm.weight",
        )
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            linear(getattr(layer.self_attn, proj), f"{prefix}.self_attn.{proj}")
        for proj in ("gate_proj", "up_proj", "down_proj"):
            linear(getattr(layer.mlp, proj), f"{prefix}.mlp.{proj}")
    assign(model.norm.weight, "model.norm.weight")
    if model.lm_head is not None:
        linear(model.lm_head, "lm_head")
    tensors.pop("lm_head.weight", None)  # a tied head saved anyway
    if tensors:
        raise ValueError(f"Tensors the port does not use: {sorted(tensors)}.")
    parameters = len(jax.tree_util.tree_leaves(nnx.state(model, nnx.Param)))
    if len(assigned) != parameters:
        raise ValueError(
            f"The checkpoint set {len(assigned)} of the model's {parameters} "
            "parameters."
        )


def read_config(directory: pathlib.Path) -> Config:
    """The :class:`Config` of a ``save_pretrained`` directory's ``config.json``."""
    return Config.from_hf(json.loads((directory / "config.json").read_text()))


def load_checkpoint(directory: pathlib.Path, config: Config | None = None) -> Decoder:
    """The :class:`Decoder` of a ``save_pretrained`` directory (``config.json`` and
    ``model.safetensors``). ``config`` overrides the one read from the directory."""
    config = read_config(directory) if config is None else config
    # Abstract parameters (shapes and dtypes, no random init): each is then set.
    model = nnx.eval_shape(lambda: Decoder(config, rngs=nnx.Rngs(0)))
    load_hf_weights(model, safetensors.numpy.load_file(directory / "model.safetensors"))
    return model


@nnx.jit
def forward(model: Decoder, tokens: jax.Array, length: jax.Array) -> jax.Array:
    """Logits ``[S, V]`` of one sequence ``tokens int [S]`` at positions ``0 .. S-1``
    whose first ``length`` tokens are real, the rest padding.

    A fixed buffer ``S`` makes one compiled shape serve every length. Causal attention
    keeps the padding out of the rows ``< length``, and RoPE's frequencies are chosen
    for ``seq_len = length``, as transformers does for that sequence unpadded.
    """
    positions = jnp.arange(tokens.shape[0], dtype=jnp.int32)
    return model(tokens[None], positions[None], seq_len=length)[0]


class Greedy(NamedTuple):
    """Greedy decoding: the prompt's logits ``[P, V]``, the new ``tokens`` and the
    logits ``[T, V]`` that chose them."""

    prompt_logits: np.ndarray
    tokens: list[int]
    logits: np.ndarray


def greedy(model: Decoder, prompt: Sequence[int], steps: int) -> Greedy:
    """Greedy decoding by full recomputation: each step runs the whole sequence, so
    every key is rotated with the frequencies of the current length (for dynamic NTK
    and LongRoPE, as transformers' ``generate(..., use_cache=False)``)."""
    n = len(prompt)
    tokens = np.zeros(n + steps - 1, np.int32)  # the last token is never fed back
    tokens[:n] = prompt
    prompt_logits, new, step_logits = None, [], []
    for length in range(n, n + steps):
        logits = np.asarray(forward(model, tokens, length))
        if prompt_logits is None:
            prompt_logits = logits[:n]
        step_logits.append(logits[length - 1])
        new.append(int(np.argmax(step_logits[-1])))
        if length < len(tokens):
            tokens[length] = new[-1]
    return Greedy(prompt_logits, new, np.stack(step_logits))


class Check(NamedTuple):
    """One checkpoint against transformers' outputs."""

    name: str
    max_abs_diff: float  # over the golden forward rows and every greedy step
    argmax_agree: int  # prompt positions whose argmax agrees
    argmax_total: int
    tokens: list[int]
    want_tokens: list[int]

    @property
    def ok(self) -> bool:
        return (
            self.max_abs_diff <= LOGITS_ATOL
            and self.argmax_agree == self.argmax_total
            and self.tokens == self.want_tokens
        )


def check(directory: pathlib.Path, config: Config | None = None) -> Check:
    """Runs the prompt of ``directory/golden.json`` and greedy decoding through the
    ported model and compares them to transformers' logits and tokens."""
    golden = json.loads((directory / "golden.json").read_text())
    model = load_checkpoint(directory, config)
    out = greedy(model, golden["input_ids"], len(golden["greedy_tokens"]))
    rows = out.prompt_logits[golden["logits_positions"]]
    diffs = [
        np.abs(rows - np.asarray(golden["logits"], np.float32)),
        np.abs(out.logits - np.asarray(golden["greedy_logits"], np.float32)),
    ]
    argmax = out.prompt_logits.argmax(-1)
    return Check(
        name=directory.name,
        max_abs_diff=float(max(d.max() for d in diffs)),
        argmax_agree=int(np.sum(argmax == np.asarray(golden["argmax"]))),
        argmax_total=len(golden["argmax"]),
        tokens=out.tokens,
        want_tokens=golden["greedy_tokens"],
    )


def checkpoints(root: pathlib.Path = CHECKPOINTS) -> list[pathlib.Path]:
    """The directories under ``root`` that hold a ``golden.json``."""
    return sorted(p.parent for p in root.glob("*/golden.json"))


def describe(config: Config) -> str:
    rope = config.rope
    scaling = "none" if rope.scaling is None else type(rope.scaling).__name__
    return f"{rope.layout}, {rope.rotated_features}/{rope.head_dim} dims, {scaling}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--checkpoint",
        type=pathlib.Path,
        action="append",
        metavar="DIR",
        help="a save_pretrained directory with a golden.json (repeatable; default: "
        "every one under tests/fixtures/checkpoints)",
    )
    args = parser.parse_args(argv)
    directories = args.checkpoint or checkpoints()
    header = (
        f"{'checkpoint':<18} {'family':<6} {'RoPE (layout, rotary, scaling)':<38} "
        f"{'max |dlogit|':>12} {'argmax':>7} {'greedy':>7}  ok"
    )
    print(header)
    print("-" * len(header))
    results = []
    for directory in directories:
        config = read_config(directory)
        result = check(directory, config)
        results.append(result)
        same = sum(
            a == b for a, b in zip(result.tokens, result.want_tokens, strict=True)
        )
        print(
            f"{result.name:<18} {config.model_type:<6} {describe(config):<38} "
            f"{result.max_abs_diff:>12.2e} "
            f"{result.argmax_agree:>3}/{result.argmax_total:<3} "
            f"{same:>3}/{len(result.want_tokens):<3}  {'yes' if result.ok else 'NO'}"
        )
    failed = [r for r in results if not r.ok]
    for r in failed:
        print(f"{r.name}: greedy {r.tokens}, transformers {r.want_tokens}")
    print(
        f"{len(results) - len(failed)}/{len(results)} checkpoints match transformers "
        f"(logits to {LOGITS_ATOL:g}, argmax and greedy tokens exactly)."
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
