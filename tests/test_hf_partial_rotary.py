"""Which model types read ``partial_rotary_factor``, and where: the reader's sets
against transformers 5.25's code and its own runs.

``hf_edge_cases.json`` (``tools/make_hf_edge_cases.py``) records, per included model
type, the code lines of the rotary modules its attention calls that name the key
(``partial_rotary_factor_source``: a static reading of the modeling code) and what
adding the key did to the type's own small model (``partial_rotary_factor_read``: at
the top level, and inside every block of its class-default ``rope_parameters``). The
sets of ``hf/_models.py`` must be exactly what those say.
"""

from __future__ import annotations

import json
import pathlib

import jax.numpy as jnp
import numpy as np
import pytest

import flax_posenc as fp
from flax_posenc.hf import _defaults, _models

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
EDGE = json.loads((FIXTURES / "hf_edge_cases.json").read_text())
SOURCE = EDGE["partial_rotary_factor_source"]
READ = EDGE["partial_rotary_factor_read"]
DETAILS = EDGE["partial_rotary_factor_details"]


def _effect(model_type: str, in_block: bool) -> str:
    """What the key did to the type's run with its class-default rope type:
    ``"rotates"`` (fewer features or frequencies; a rotary module that then fails on
    its own M-RoPE sections included), ``"fails"`` (fewer frequencies, then the
    attention failed on the shapes), ``"ignored"`` or ``"not asked"``."""
    question = next(iter(READ[model_type])) + ("/in_block" if in_block else "")
    answer = READ[model_type][question]
    if isinstance(answer, dict):  # {"skipped": why}: no rope block (GPT-J)
        return "not asked"
    if answer is True:
        return "rotates"
    if answer == "error":
        failed_in_rotary = DETAILS[model_type][question]["failed_in_rotary_module"]
        return "rotates" if failed_in_rotary else "fails"
    assert answer is False, (model_type, question, answer)
    return "ignored"


PROBED = sorted(SOURCE)  # types whose small model ran without the key
# Types whose class-default blocks use plain RoPE: the rotary class's own
# compute_default_rope_parameters decides (every scaling family's init function in
# modeling_rope_utils reads the block's factor).
PLAIN = [t for t in PROBED if next(iter(READ[t])) == "default"]
# The probe and the reader disagree here; see the CHANGELOG / issue 31 follow-up.
NOT_FOLLOWED = {
    # Dots3NoteTextConfig writes its own factor (0.25) into every block, over the
    # config's: its rotary code names the key, but a given factor changes nothing.
    "dots3_note_text": "the config class overwrites the blocks' factor",
    # The factor sizes the rope slice of its [nope | rope] heads and rotates them; the
    # probe's 0.5 fails only because its compressed-sparse-attention layers rotate the
    # indexer's smaller heads (index_head_dim 128 < 256) with the same block, which the
    # reader refuses (hf_edge_cases.json, section deepseek_v4_indexer).
    "deepseek_v4": "a rope slice larger than the indexer's heads fails",
}


def _by_probe(in_block: bool, effect: str, types=PROBED) -> set[str]:
    return {t for t in types if _effect(t, in_block) == effect}


def test_the_probe_agrees_with_the_modeling_code():
    """A plain-RoPE type's rotary class names the key in its code exactly when adding
    the key to its rope block changes or breaks its run; the key never acts at the top
    level alone."""
    by_source = {t for t in PLAIN if SOURCE[t]["reads"]}
    by_probe = _by_probe(True, "rotates", PLAIN) | _by_probe(True, "fails", PLAIN)
    assert by_source - by_probe == {"dots3_note_text"}  # see NOT_FOLLOWED
    assert by_probe <= by_source
    assert _by_probe(False, "rotates") <= _by_probe(True, "rotates")


def test_the_reader_reads_the_factor_where_transformers_does():
    """PARTIAL_ROTARY, PARTIAL_FAILS and PARTIAL_BLOCK_ONLY are the probe's answers
    for every probed type, and name no other type."""
    readers = _models.PARTIAL_ROTARY | _models.PARTIAL_FAILS
    assert readers <= set(PROBED)
    assert _models.PARTIAL_ROTARY == _by_probe(True, "rotates")
    fails = _by_probe(True, "fails", PLAIN) - set(NOT_FOLLOWED)
    assert _models.PARTIAL_FAILS == fails
    assert _models.PARTIAL_BLOCK_ONLY == readers & _by_probe(False, "ignored")


# GLM-4.1V-9B's text RoPE as its checkpoint publishes it (wrapped in the glm4v
# config), at the fixture's small sizes: head 128, factor 0.5, sections [8, 12, 12].
GLM41V = json.loads((FIXTURES / "hf_models.json").read_text())["cases"]
GLM41V = next(c for c in GLM41V if c["name"] == "glm4v_text/glm41v_9b")


@pytest.mark.parametrize("form", ["config", "config_dict"])
def test_glm41v_is_read_and_rotates_as_transformers(form):
    """GLM-4.1V's partial_rotary_factor (read by Glm4vTextRotaryEmbedding from the rope
    block) with M-RoPE: q as its own attention rotates it (hf_models.json)."""
    config = {"model_type": "glm4v", "text_config": GLM41V[form]}
    layer = fp.read_hf_rope(config).layer(GLM41V["layer_index"])
    assert layer.rope.rotated_features == 64
    assert layer.mrope_section == (8, 12, 12)
    positions = jnp.asarray(GLM41V["position_ids"])  # [3, B, L]
    got = fp.apply_mrope(
        jnp.asarray(GLM41V["q_in"], jnp.float32),
        positions,
        layer.rope,
        mrope_section=layer.mrope_section,
        mrope_layout=layer.mrope_layout,
    )
    want = np.asarray(GLM41V["q_out"], np.float32)
    # float32 angles: both sides round p * inv_freq, an error growing like p 2**-22
    allowance = np.abs(want).max() * (2e-6 + 4 * positions.max(0) * 2.0**-24)
    allowance = np.broadcast_to(allowance[..., None, None], want.shape)
    np.testing.assert_array_less(np.abs(np.asarray(got) - want), allowance)


GLM4V = {
    "model_type": "glm4v_text",
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "rope_parameters": {"rope_type": "default", "mrope_section": [8, 12, 12]},
}
ZAYA = {"model_type": "zaya", "hidden_size": 256, "num_attention_heads": 4}
MISTRAL4 = {  # its class-default YaRN block, with another factor
    "model_type": "mistral4",
    "rope_parameters": {
        **_defaults.DEFAULTS["mistral4"]["rope_parameters"],
        "partial_rotary_factor": 0.25,
    },
}

REFUSED = [
    # A type whose rotary module reads the factor but whose attention rotates the
    # whole head: transformers' first forward fails.
    ({"model_type": "solar_open", "partial_rotary_factor": 0.5},
     r"rope_parameters\['partial_rotary_factor'\] is 0.5: transformers' 'solar_open' "
     r"computes fewer frequencies .* \(expected 1 or no factor\). Remove the key."),
    # A type that reads it only inside its rope blocks.
    ({**ZAYA, "partial_rotary_factor": 0.25},
     r"config\['partial_rotary_factor'\] \(zaya\) is 0.25, but transformers' 'zaya' "
     r"reads the factor only inside its rope blocks .* Move it into rope_parameters."),
    ({"model_type": "mellum", "partial_rotary_factor": 0.5},
     r"'mellum' reads the factor only inside its rope blocks .* Remove the key."),
    # M-RoPE sections must fill the rotated pairs the factor leaves.
    ({**GLM4V, "partial_rotary_factor": 0.25},
     r"rope_parameters\['mrope_section'\] is \[8, 12, 12\] \(sum 32\), but the 32 "
     r"rotated features .* make 16 pairs: transformers' 'glm4v_text' rotary module "
     r"fails on it. Give sections that sum to 16."),
    # MLA: the factor of the full head must give the rope slice.
    (MISTRAL4,
     r"rope_parameters\['partial_rotary_factor'\] is 0.25: transformers' 'mistral4' "
     r"computes int\(head_dim 128 x 0.25\) = 32 rotated features for a rope slice "
     r"\(qk_rope_head_dim\) of 64, and fails. Give 0.5 or leave the factor out."),
]  # fmt: skip


@pytest.mark.parametrize("config, match", REFUSED, ids=range(len(REFUSED)))
def test_refused(config, match):
    with pytest.raises(ValueError, match=match):
        fp.read_hf_rope(config)


def test_glm4v_text_reads_the_factor_at_either_place():
    block = {**GLM4V["rope_parameters"], "partial_rotary_factor": 0.5}
    in_block = fp.read_hf_rope({**GLM4V, "rope_parameters": block})
    top_level = fp.read_hf_rope({**GLM4V, "partial_rotary_factor": 0.5})
    assert in_block.layer(0) == top_level.layer(0)
    assert in_block.layer(0).rope.rotated_features == 64
