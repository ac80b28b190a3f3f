"""examples/port_hf.py against transformers' own outputs on tiny random checkpoints.

The checkpoints and golden outputs come from ``tools/make_hf_checkpoints.py``
(transformers 5, float32). ``load_decode_cases`` reads ``decode_golden.json``, the
per-step logits of transformers' ``generate`` past the pre-training length for dynamic
NTK and LongRoPE; its schema is in ``tests/fixtures/README.md``.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys
from typing import Any, NamedTuple

import numpy as np
import pytest
import safetensors.numpy
from flax import nnx

sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "examples"))

import port_hf

CHECKPOINTS = pathlib.Path(__file__).parent / "fixtures" / "checkpoints"
DECODE_GOLDEN = CHECKPOINTS / "decode_golden.json"


class DecodeCase(NamedTuple):
    """One ``generate`` run of ``decode_golden.json``.

    ``tokens[t]`` sits at position ``len(input_ids) + t`` and was chosen by
    ``logits[t]``, computed with ``len(input_ids) + t`` tokens seen.
    """

    name: str
    checkpoint: pathlib.Path  # config.json + model.safetensors
    use_cache: bool
    input_ids: np.ndarray  # int32 [L0]
    tokens: np.ndarray  # int32 [T]
    logits: np.ndarray  # float32 [T, V]
    forward_calls: list[dict[str, Any]]  # positions [start, stop), seq_len, inv_freq


def load_decode_cases(path: pathlib.Path = DECODE_GOLDEN) -> dict[str, DecodeCase]:
    """The cases of ``decode_golden.json`` by name (``<checkpoint>_cached`` /
    ``_uncached``), arrays as numpy (float32 bit for bit as transformers made them)."""
    data = json.loads(path.read_text())
    return {
        c["name"]: DecodeCase(
            name=c["name"],
            checkpoint=path.parent / c["checkpoint"],
            use_cache=c["use_cache"],
            input_ids=np.asarray(c["input_ids"], np.int32),
            tokens=np.asarray(c["tokens"], np.int32),
            logits=np.asarray(c["logits"], np.float32),
            forward_calls=c["forward_calls"],
        )
        for c in data["cases"]
    }


def hf_config(name: str) -> dict:
    return json.loads((CHECKPOINTS / name / "config.json").read_text())


def with_rope(config: port_hf.Config, **changes) -> port_hf.Config:
    return dataclasses.replace(config, rope=dataclasses.replace(config.rope, **changes))


@pytest.mark.parametrize(
    "name",
    [
        "llama_gqa",
        pytest.param("llama_dynamic_ntk", marks=pytest.mark.slow),
        pytest.param("phi3_longrope", marks=pytest.mark.slow),
        "glm",  # interleaved pairs, partial rotary 0.5
    ],
)
def test_port_matches_transformers(name):
    """Forward logits (a few rows, float32 to 1e-4) and argmax at every prompt
    position, and greedy decoding (8 tokens past a 12-token prompt, logits and tokens):
    for dynamic NTK and Phi-3 these pass the original 16 positions."""
    result = port_hf.check(CHECKPOINTS / name)
    assert result.max_abs_diff <= port_hf.LOGITS_ATOL, result
    assert result.argmax_agree == result.argmax_total, result
    assert result.tokens == result.want_tokens, result


def test_glm_port_matches_with_interleaved_layout():
    """The GLM port itself is right: with the layout GLM uses it matches, with the
    other one the logits are far off (the fixture sees the RoPE layout)."""
    config = port_hf.read_config(CHECKPOINTS / "glm")
    assert config.rope.rotated_features == 8  # partial_rotary_factor 0.5 of head_dim 16
    result = port_hf.check(CHECKPOINTS / "glm", with_rope(config, layout="interleaved"))
    assert result.ok, result
    wrong = port_hf.check(CHECKPOINTS / "glm", with_rope(config, layout="half"))
    assert wrong.max_abs_diff > 1e-2


@pytest.mark.parametrize("name", ["llama_dynamic_ntk", "phi3_longrope"])
def test_scaling_is_what_the_golden_sees(name):
    """Without the scaling family the greedy steps past 16 positions no longer match:
    the fixture checks dynamic NTK / LongRoPE, not just plain RoPE."""
    config = port_hf.read_config(CHECKPOINTS / name)
    assert config.rope.scaling is not None
    result = port_hf.check(CHECKPOINTS / name, with_rope(config, scaling=None))
    assert result.max_abs_diff > 1e-2


def test_decode_fixture_layout():
    cases = load_decode_cases()
    assert set(cases) == {
        f"{m}_{c}"
        for m in ("llama_dynamic_ntk", "phi3_longrope")
        for c in ("cached", "uncached")
    }
    for case in cases.values():
        assert (case.checkpoint / "model.safetensors").is_file()
        steps, vocab = case.logits.shape
        assert case.tokens.shape == (steps,) and vocab == 256
        np.testing.assert_array_equal(case.logits.argmax(-1), case.tokens)
        calls = case.forward_calls
        assert len(calls) == steps  # one forward per new token
        for t, call in enumerate(calls):  # positions [start, stop)
            assert call["positions"][1] == call["seq_len"] == len(case.input_ids) + t
    # Cached decoding feeds one position per step, except where Phi-3 drops its cache
    # on first passing original_max_position_embeddings (16) and recomputes all 17.
    starts = [c["positions"][0] for c in cases["phi3_longrope_cached"].forward_calls]
    assert starts == [0] + list(range(10, 16)) + [0] + list(range(17, 25))
    starts = [
        c["positions"][0] for c in cases["llama_dynamic_ntk_cached"].forward_calls
    ]
    assert starts == [0] + list(range(10, 25))


@pytest.mark.parametrize(
    "name",
    ["llama_dynamic_ntk_uncached", "phi3_longrope_cached", "phi3_longrope_uncached"],
)
def test_full_recompute_reproduces_decode_golden(name):
    """The example's full recomputation equals transformers' uncached generate, and
    Phi-3's cached one (which recomputes everything when it switches to the long
    factors): per-step logits past the original length, and tokens."""
    case = load_decode_cases()[name]
    model = port_hf.load_checkpoint(case.checkpoint)
    out = port_hf.greedy(model, case.input_ids.tolist(), len(case.tokens))
    np.testing.assert_allclose(
        out.logits, case.logits, atol=port_hf.LOGITS_ATOL, rtol=0
    )
    assert out.tokens == case.tokens.tolist()


def test_main_prints_a_table(capsys):
    code = port_hf.main(["--checkpoint", str(CHECKPOINTS / "llama_gqa")])
    out = capsys.readouterr().out
    assert code == 0
    assert "llama_gqa" in out and "1/1 checkpoints match" in out


def test_loader_rejects_a_missing_tensor():
    directory = CHECKPOINTS / "llama_gqa"
    tensors = safetensors.numpy.load_file(directory / "model.safetensors")
    del tensors["model.layers.1.mlp.up_proj.weight"]
    config = port_hf.read_config(directory)
    model = nnx.eval_shape(lambda: port_hf.Decoder(config, rngs=nnx.Rngs(0)))
    with pytest.raises(
        ValueError, match=r"no tensor 'model\.layers\.1\.mlp\.up_proj\.weight'"
    ):
        port_hf.load_hf_weights(model, tensors)
