"""Axial (2-D) RoPE and Qwen2-VL M-RoPE.

Truth: float64 transcriptions written here (EVA-02's ``VisionRotaryEmbeddingFast``,
the M-RoPE section rule as documented in ``tests/fixtures/hf_mrope.json``) and the
transformers golden fixtures themselves.

Tolerances follow ``tests/test_hf_parity.py``: a float32 angle ``p * inv_freq`` is off
by at most ``angle * (1e-6 + 2^-23)`` (``inv_freq`` rounding plus the product's), and
cos/sin add ``2^-22``; a rotated feature sums two such products, so it may be off by
``2 max|x|`` times that.
"""

import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import normal
from hypothesis import given
from hypothesis import strategies as st

import flax_posenc as fp

FIXTURES = json.loads(
    (pathlib.Path(__file__).parent / "fixtures" / "hf_mrope.json").read_text()
)
MROPE_CASES = {case["name"]: case for case in FIXTURES["cases"]}
QWEN2_VL = fp.RopeConfig(
    head_dim=FIXTURES["head_dim"], theta=FIXTURES["config"]["rope_theta"]
)
QWEN2_VL_SECTION = tuple(FIXTURES["mrope_section"])


def f32(values):
    return np.asarray(values, np.float32)


def angle_allowance(max_abs_x, max_angle):
    return 2 * max_abs_x * (max_angle * (1e-6 + 2**-23) + 2**-22)


def rotate64(x, angles, layout):
    """float64 RoPE: pair ``j`` of ``x [..., L, N, H]`` turned by ``angles[..., L, j]``."""
    x = np.asarray(x, np.float64)
    half = angles.shape[-1]
    first = np.s_[..., :half] if layout == "half" else np.s_[..., 0 : 2 * half : 2]
    second = (
        np.s_[..., half : 2 * half]
        if layout == "half"
        else np.s_[..., 1 : 2 * half : 2]
    )
    cos, sin = np.cos(angles)[..., None, :], np.sin(angles)[..., None, :]
    out = x.copy()
    out[first] = x[first] * cos - x[second] * sin
    out[second] = x[second] * cos + x[first] * sin
    return out


def scores64(q, k):
    """float64 ``s[..., n, m, l] = q[..., m, n, :] . k[..., l, n, :]``."""
    q, k = np.asarray(q, np.float64), np.asarray(k, np.float64)
    return np.einsum("...mnh,...lnh->...nml", q, k)


def score_scale(q, k):
    q, k = np.asarray(q, np.float64), np.asarray(k, np.float64)
    return np.einsum(
        "...mn,...ln->...nml", np.linalg.norm(q, axis=-1), np.linalg.norm(k, axis=-1)
    )


# --------------------------------------------------------------------------------------
# Axial RoPE
# --------------------------------------------------------------------------------------


def eva02_reference(x, rows, cols, theta, rotary_dim):
    """float64 transcription of EVA-02's ``VisionRotaryEmbeddingFast`` + apply.

    ``dim = R/2`` per axis; ``freqs = theta^(-arange(0, dim, 2)/dim)``; each axis's
    angles repeated pairwise (``(n r), r=2``), rows then columns concatenated; then
    ``t * cos + rotate_half(t) * sin`` with EVA's interleaved ``rotate_half``.
    """
    dim = rotary_dim // 2
    freqs = 1.0 / theta ** (np.arange(0, dim, 2)[: dim // 2] / dim)
    freqs_h = np.repeat(np.asarray(rows, np.float64)[..., None] * freqs, 2, axis=-1)
    freqs_w = np.repeat(np.asarray(cols, np.float64)[..., None] * freqs, 2, axis=-1)
    angles = np.concatenate([freqs_h, freqs_w], axis=-1)[..., None, :]
    x = np.asarray(x, np.float64)
    t, rest = x[..., :rotary_dim], x[..., rotary_dim:]
    pairs = t.reshape(t.shape[:-1] + (rotary_dim // 2, 2))
    rotated_half = np.stack([-pairs[..., 1], pairs[..., 0]], axis=-1).reshape(t.shape)
    t = t * np.cos(angles) + rotated_half * np.sin(angles)
    return np.concatenate([t, rest], axis=-1)


def grid_batch(height, width, shift):
    """``[2, h * w, 2]``: a grid and the same grid moved by ``shift``."""
    grid = np.asarray(fp.grid_positions((height, width)))
    return jnp.asarray(np.stack([grid, grid + np.asarray(shift)]))


def test_grid_positions_are_row_major():
    assert fp.grid_positions((2, 3)).tolist() == [
        [0, 0],
        [0, 1],
        [0, 2],
        [1, 0],
        [1, 1],
        [1, 2],
    ]
    video = np.asarray(fp.grid_positions((2, 3, 4)))
    assert video.dtype == np.int32
    np.testing.assert_array_equal(
        video, np.stack(np.unravel_index(np.arange(24), (2, 3, 4)), axis=-1)
    )


@pytest.mark.parametrize(
    ("head_dim", "rotary_dim", "theta"), [(32, 32, 10000.0), (40, 16, 100.0)]
)
def test_axial_matches_eva02(head_dim, rotary_dim, theta):
    config = fp.RopeConfig(
        head_dim=head_dim, theta=theta, rotary_dim=rotary_dim, layout="interleaved"
    )
    positions = grid_batch(3, 4, (9, 30))
    x = normal((2, 12, 2, head_dim), seed=0)
    got = jax.jit(fp.apply_axial_rope, static_argnums=2)(x, positions, config)
    expected = eva02_reference(
        x, positions[..., 0], positions[..., 1], theta, rotary_dim
    )
    max_angle = float(np.max(positions))  # fastest frequency: 1 rad per position
    np.testing.assert_allclose(
        got, expected, atol=angle_allowance(np.max(np.abs(x)), max_angle), rtol=0
    )


def test_eva02_resolution_interpolation_is_linear_scaling():
    """EVA-02 fine-tuned at ``ft`` patches per side from ``pt``: t = arange(ft) pt/ft."""
    ft, pt = 6, 4
    config = fp.RopeConfig(
        head_dim=16, layout="interleaved", scaling=fp.LinearScaling(factor=ft / pt)
    )
    positions = fp.grid_positions((ft, ft))
    x = normal((1, ft * ft, 2, 16), seed=9)
    got = jax.jit(fp.apply_axial_rope, static_argnums=2)(x, positions, config)
    fractional = np.asarray(positions) * pt / ft
    expected = eva02_reference(x, fractional[:, 0], fractional[:, 1], 10000.0, 16)
    np.testing.assert_allclose(
        got, expected, atol=angle_allowance(np.max(np.abs(x)), ft), rtol=0
    )


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("num_axes", [2, 3])
def test_axial_matches_float64_formula(layout, num_axes):
    head_dim, rotary_dim, theta = 16, 12, 500.0
    config = fp.RopeConfig(
        head_dim=head_dim, theta=theta, rotary_dim=rotary_dim, layout=layout
    )
    rng = np.random.default_rng(1)
    positions = jnp.asarray(rng.integers(-50, 200, (2, 5, num_axes)), jnp.int32)
    x = normal((2, 5, 3, head_dim), seed=2)
    got = jax.jit(fp.apply_axial_rope, static_argnums=2)(x, positions, config)
    per_axis = rotary_dim // (2 * num_axes)
    inv_freq = theta ** (-2.0 * np.arange(per_axis) / (rotary_dim / num_axes))
    # pair j = a * per_axis + i turns with axis a at inv_freq[i]
    angles = (np.asarray(positions, np.float64)[..., None] * inv_freq).reshape(
        positions.shape[:-1] + (rotary_dim // 2,)
    )
    expected = rotate64(x, angles, layout)
    max_angle = float(np.max(np.abs(positions)))
    np.testing.assert_allclose(
        got, expected, atol=angle_allowance(np.max(np.abs(x)), max_angle), rtol=0
    )


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_one_axis_is_apply_rope_bitwise(layout):
    config = fp.RopeConfig(head_dim=16, rotary_dim=12, layout=layout)
    positions = jnp.asarray([[0, 3, 7, 1000], [5, 6, 7, 8]])
    x = normal((2, 4, 2, 16), seed=3)
    for run in (lambda f: f, jax.jit):
        axial = run(lambda x, p: fp.apply_axial_rope(x, p[..., None], config))
        plain = run(lambda x, p: fp.apply_rope(x, p, config))
        np.testing.assert_array_equal(axial(x, positions), plain(x, positions))


AXIAL_2D = fp.RopeConfig(head_dim=16, theta=100.0)
apply_axial_2d = jax.jit(lambda x, p: fp.apply_axial_rope(x, p, AXIAL_2D))
QK_2D = normal((2, 1, 6, 2, 16), seed=4)
GRID_2D = np.asarray(fp.grid_positions((2, 3)))


def axial_scores(q_positions, k_positions):
    q = apply_axial_2d(QK_2D[0], jnp.asarray(q_positions))
    k = apply_axial_2d(QK_2D[1], jnp.asarray(k_positions))
    return scores64(q, k), score_scale(q, k)


@given(row_shift=st.integers(-3000, 3000), col_shift=st.integers(-3000, 3000))
def test_2d_scores_invariant_to_shifting_rows_and_columns(row_shift, col_shift):
    base, scale = axial_scores(GRID_2D, GRID_2D)
    shifted = GRID_2D + np.array([row_shift, col_shift])
    moved, _ = axial_scores(shifted, shifted)
    largest = np.max(np.abs(shifted))
    # float32 angles up to `largest` rad: 32 ulps per score, as assert_shift_invariance.
    np.testing.assert_array_less(
        np.abs(moved - base), scale * (1e-6 + 2.0**-19 * largest)
    )


@pytest.mark.parametrize("axis", [0, 1])
def test_2d_scores_depend_on_each_offset(axis):
    base, scale = axial_scores(GRID_2D, GRID_2D)
    k_moved = GRID_2D + np.eye(2, dtype=GRID_2D.dtype)[axis]  # one axis only
    moved, _ = axial_scores(GRID_2D, k_moved)
    assert np.max(np.abs(moved - base) / scale) > 0.05


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_axial_keeps_dtype(dtype):
    positions = grid_batch(3, 4, (2, 1))
    x = normal((2, 12, 2, 16), seed=5)
    got = apply_axial_2d(x.astype(dtype), positions)
    assert got.dtype == dtype
    reference = apply_axial_2d(x, positions)
    # one rounding of the input and one of the output: 2 eps of the dtype times |x|.
    atol = 2 * float(jnp.finfo(dtype).eps) * float(np.max(np.abs(x))) * 2
    np.testing.assert_allclose(np.asarray(got, np.float32), reference, atol=atol)


AXIAL_BAD_INPUTS = [
    ((2, 12, 2, 16), np.zeros((12, 2), np.float32), 16, 16, TypeError, "`positions`"),
    ((2, 12, 2, 8), np.zeros((12, 2), np.int32), 16, 16, ValueError, "`x`"),
    ((2, 12, 2, 16), np.zeros((12,), np.int32), 16, 16, ValueError, "`positions`"),
    (
        (2, 12, 2, 16),
        np.zeros((5, 2), np.int32),
        16,
        16,
        ValueError,
        r"L = x.shape\[-3\] = 12",
    ),
    ((2, 12, 2, 16), np.zeros((12, 2), np.int32), 16, 6, ValueError, "rotary_dim"),
    ((2, 12, 2, 16), np.zeros((12, 3), np.int32), 16, 16, ValueError, "rotary_dim"),
]


@pytest.mark.parametrize(
    ("x_shape", "positions", "head_dim", "rotary_dim", "error", "match"),
    AXIAL_BAD_INPUTS,
)
def test_axial_rejects_bad_inputs(
    x_shape, positions, head_dim, rotary_dim, error, match
):
    config = fp.RopeConfig(head_dim=head_dim, rotary_dim=rotary_dim)
    with pytest.raises(error, match=match):
        fp.apply_axial_rope(jnp.zeros(x_shape), positions, config)


@pytest.mark.parametrize(
    ("grid_shape", "error", "match"),
    [
        ((), ValueError, "grid_shape"),
        ((3, 0), ValueError, r"grid_shape\[1\]"),
        ((3, 2.0), TypeError, r"grid_shape\[1\]"),
        (4, TypeError, "grid_shape"),
    ],
)
def test_grid_positions_rejects_bad_shapes(grid_shape, error, match):
    with pytest.raises(error, match=match):
        fp.grid_positions(grid_shape)


# --------------------------------------------------------------------------------------
# M-RoPE (Qwen2-VL)
# --------------------------------------------------------------------------------------


def mrope_angles64(positions, inv_freq, sections):
    """float64 transcription of the fixture's documented rule: per-row angles
    ``pos[a][..., None] * inv_freq``, split by ``sections``, chunk ``i`` from row
    ``i % 3``, concatenated."""
    freqs = np.asarray(positions, np.float64)[..., None] * np.asarray(
        inv_freq, np.float64
    )
    chunks = np.split(freqs, np.cumsum(sections)[:-1], axis=-1)
    return np.concatenate([chunk[i % 3] for i, chunk in enumerate(chunks)], axis=-1)


def test_mrope_fixture_frequencies_are_qwen2_vl_defaults():
    assert FIXTURES["versions"]["transformers"].startswith("5.")
    assert set(MROPE_CASES) == {"text_only", "image_and_text"}
    assert FIXTURES["attention_scaling"] == 1.0
    np.testing.assert_allclose(
        fp.rope_frequencies(QWEN2_VL).inv_freq, f32(FIXTURES["inv_freq"]), rtol=1e-6
    )


@pytest.mark.parametrize("name", sorted(MROPE_CASES))
def test_mrope_tables_match_transformers(name):
    case = MROPE_CASES[name]
    positions = np.asarray(case["position_ids"])
    cos, sin = jax.jit(
        fp.mrope_cos_sin, static_argnums=1, static_argnames="mrope_section"
    )(jnp.asarray(positions), QWEN2_VL, mrope_section=QWEN2_VL_SECTION)
    half = QWEN2_VL.rotated_features // 2
    hf_cos, hf_sin = f32(case["cos"]), f32(case["sin"])
    np.testing.assert_array_equal(hf_cos[..., :half], hf_cos[..., half:])
    angles = mrope_angles64(positions, FIXTURES["inv_freq"], QWEN2_VL_SECTION)
    allowance = np.abs(angles) * (1e-6 + 2**-23) + 2**-22
    for ours, theirs, truth in (
        (cos, hf_cos[..., :half], np.cos(angles)),
        (sin, hf_sin[..., :half], np.sin(angles)),
    ):
        assert np.all(np.abs(np.asarray(ours) - theirs) <= allowance)
        assert np.all(np.abs(np.asarray(ours) - truth) <= allowance)


@pytest.mark.parametrize("name", sorted(MROPE_CASES))
def test_apply_mrope_matches_transformers(name):
    case = MROPE_CASES[name]
    q = jnp.asarray(f32(case["q"]))
    positions = jnp.asarray(case["position_ids"])
    rotated = jax.jit(
        fp.apply_mrope, static_argnums=2, static_argnames="mrope_section"
    )(q, positions, QWEN2_VL, mrope_section=QWEN2_VL_SECTION)
    max_angle = np.max(np.abs(case["position_ids"])) * np.max(f32(FIXTURES["inv_freq"]))
    allowance = angle_allowance(np.max(np.abs(q)), max_angle)
    np.testing.assert_allclose(rotated, f32(case["q_rotated"]), atol=allowance, rtol=0)
    angles = mrope_angles64(
        case["position_ids"], FIXTURES["inv_freq"], QWEN2_VL_SECTION
    )
    np.testing.assert_allclose(rotated, rotate64(q, angles, "half"), atol=allowance)


@pytest.mark.parametrize(
    ("head_dim", "rotary_dim", "layout", "section", "mrope_layout"),
    [
        (128, 128, "half", QWEN2_VL_SECTION, "contiguous"),
        pytest.param(
            16, 12, "interleaved", (1, 3, 2), "contiguous", marks=pytest.mark.slow
        ),
        pytest.param(
            128, 128, "half", (24, 20, 20), "interleaved", marks=pytest.mark.slow
        ),
        (16, 12, "interleaved", (2, 2, 2), "hw_alternating"),
        (16, 16, "half", (2, 2, 4), "interleaved"),
        (16, 16, "half", (2, 2, 4), "xd"),
        pytest.param(16, 12, "half", (2, 2, 2), "xd", marks=pytest.mark.slow),
    ],
)
def test_text_only_mrope_is_apply_rope_bitwise(
    head_dim, rotary_dim, layout, section, mrope_layout
):
    """Equal rows (text tokens): every M-RoPE layout is exactly 1-D RoPE."""
    config = fp.RopeConfig(
        head_dim=head_dim, theta=1e6, rotary_dim=rotary_dim, layout=layout
    )
    text = np.asarray(MROPE_CASES["text_only"]["position_ids"])
    np.testing.assert_array_equal(text[0], text[1])
    np.testing.assert_array_equal(text[0], text[2])
    x = normal((2, 8, 2, head_dim), seed=6)
    for run in (lambda f: f, jax.jit):
        mrope = run(
            lambda x, p: fp.apply_mrope(
                x, p, config, mrope_section=section, mrope_layout=mrope_layout
            )
        )
        plain = run(lambda x, p: fp.apply_rope(x, p, config))
        rows = jnp.asarray(text[:1].repeat(len(section), 0))
        got, want = mrope(x, rows), plain(x, jnp.asarray(text[0]))
        if mrope_layout == "xd":  # its own (unfused) arithmetic: float32 rounding
            np.testing.assert_allclose(got, want, atol=1e-6)
        else:
            np.testing.assert_array_equal(got, want)


def _rows64(positions, inv_freq, rows):
    """float64 angles ``positions[rows[j]] * inv_freq[j]``: ``[..., R/2]``."""
    return np.stack(
        [positions[r] * inv_freq[j] for j, r in enumerate(rows)], -1
    ).astype(np.float64)


def test_hw_alternating_rows_are_ernie_4_5_vl():
    """Pairs 2i / 2i + 1 (i < s) take height / width, the rest temporal (a
    transcription of Ernie-4.5-VL's pre-rotated frequencies + recomposition)."""
    config = fp.RopeConfig(head_dim=16, theta=1e4)
    positions = np.stack([np.arange(5), 7 * np.arange(5), 3 + np.arange(5)])
    cos, sin = fp.mrope_cos_sin(
        jnp.asarray(positions),
        config,
        mrope_section=(3, 3, 2),
        mrope_layout="hw_alternating",
    )
    inv_freq = 1e4 ** -(np.arange(0, 16, 2) / 16)
    angles = _rows64(positions, inv_freq, [1, 2, 1, 2, 1, 2, 0, 0])
    np.testing.assert_allclose(cos, np.cos(angles), atol=2e-6)
    np.testing.assert_allclose(sin, np.sin(angles), atol=2e-6)


def test_interleaved_rows_are_qwen3_vl():
    """transformers' Qwen3-VL ``apply_interleaved_mrope``: ``freqs_t = freqs[0]``
    (temporal), then for ``(row, offset)`` in ``((1, 1), (2, 2))``: ``freqs_t[...,
    offset : 3 * mrope_section[row] : 3] = freqs[row, ..., same]``. For Qwen3-VL's
    ``(24, 20, 20)`` pair ``j`` takes the height where ``j % 3 == 1`` and ``j < 60``,
    the width where ``j % 3 == 2`` and ``j < 60``, the temporal row otherwise."""
    section = (24, 20, 20)
    config = fp.RopeConfig(head_dim=128, theta=5e6)  # Qwen3-VL's rope_theta
    rows = np.zeros(64, int)
    for row, offset in ((1, 1), (2, 2)):
        rows[offset : 3 * section[row] : 3] = row
    assert rows[:6].tolist() == [0, 1, 2, 0, 1, 2]
    assert rows[57:].tolist() == [0, 1, 2, 0, 0, 0, 0]  # 60..63: temporal
    positions = np.stack([3 + np.arange(4), 11 * np.arange(4), 40 + 2 * np.arange(4)])
    inv_freq = 5e6 ** -(np.arange(0, 128, 2) / 128)
    angles = _rows64(positions, inv_freq, rows)  # [L, 64], float64
    cos, sin = fp.mrope_cos_sin(
        jnp.asarray(positions),
        config,
        mrope_section=section,
        mrope_layout="interleaved",
    )
    # float32 angles up to 46 rad: within 46 * 2^-23 of the float64 ones.
    np.testing.assert_allclose(cos, np.cos(angles), rtol=0, atol=1e-5)
    np.testing.assert_allclose(sin, np.sin(angles), rtol=0, atol=1e-5)
    q = np.asarray(normal((4, 2, 128), seed=9), np.float64)
    got = fp.apply_mrope(
        jnp.asarray(q, jnp.float32),
        jnp.asarray(positions),
        config,
        mrope_section=section,
        mrope_layout="interleaved",
    )
    np.testing.assert_allclose(got, rotate64(q, angles, "half"), rtol=0, atol=5e-5)


def test_xd_rope_gives_rows_to_features_not_pairs():
    """HunYuan-VL's XD-RoPE: cat(f, f) cut into chunks of 2 * section[a] features,
    chunk a at row a; a rotate_half pair may then mix two rows (float64
    transcription of its recomposition and apply_rotary_pos_emb)."""
    config = fp.RopeConfig(head_dim=16, theta=1e4)
    section = (2, 2, 2, 2)
    positions = np.stack(
        [np.arange(4), 5 * np.arange(4), 2 + np.arange(4), 9 * np.arange(4)]
    )
    x = np.asarray(normal((4, 1, 16), seed=8), np.float64)
    inv_freq = 1e4 ** -(np.arange(0, 16, 2) / 16)
    feature_rows = np.repeat(np.arange(4), 4)  # 2 * section[a] features per row
    angles = np.stack(
        [positions[r] * inv_freq[f % 8] for f, r in enumerate(feature_rows)], -1
    )[:, None, :]
    rotated = np.concatenate([-x[..., 8:], x[..., :8]], -1)
    want = x * np.cos(angles) + rotated * np.sin(angles)
    got = fp.apply_mrope(
        jnp.asarray(x, jnp.float32),
        jnp.asarray(positions),
        config,
        mrope_section=section,
        mrope_layout="xd",
    )
    np.testing.assert_allclose(got, want, atol=2e-5)
    assert not np.allclose(
        got,
        fp.apply_rope(jnp.asarray(x, jnp.float32), jnp.asarray(positions[0]), config),
        atol=1e-2,
    )


apply_qwen2_vl = jax.jit(
    lambda x, p: fp.apply_mrope(x, p, QWEN2_VL, mrope_section=QWEN2_VL_SECTION)
)
QK_MROPE = normal((2, 1, 8, 2, 128), seed=7)
IMAGE_POSITIONS = np.asarray(MROPE_CASES["image_and_text"]["position_ids"])[:, :1]


def mrope_scores(q_positions, k_positions):
    q = apply_qwen2_vl(QK_MROPE[0], jnp.asarray(q_positions))
    k = apply_qwen2_vl(QK_MROPE[1], jnp.asarray(k_positions))
    return scores64(q, k), score_scale(q, k)


@given(shift=st.integers(-5000, 5000))
def test_mrope_scores_invariant_to_shifting_all_rows(shift):
    base, scale = mrope_scores(IMAGE_POSITIONS, IMAGE_POSITIONS)
    shifted = IMAGE_POSITIONS + shift
    moved, _ = mrope_scores(shifted, shifted)
    largest = np.max(np.abs(shifted))
    np.testing.assert_array_less(
        np.abs(moved - base), scale * (1e-6 + 2.0**-19 * largest)
    )


@pytest.mark.parametrize("row", [0, 1, 2])
def test_mrope_scores_depend_on_each_row(row):
    base, scale = mrope_scores(IMAGE_POSITIONS, IMAGE_POSITIONS)
    # the width section's fastest frequency is 1e6^(-80/128): 10^4 positions ~ 1.8 rad
    k_moved = (
        IMAGE_POSITIONS
        + 10_000 * np.eye(3, dtype=IMAGE_POSITIONS.dtype)[row, :, None, None]
    )
    moved, _ = mrope_scores(IMAGE_POSITIONS, k_moved)
    assert np.max(np.abs(moved - base) / scale) > 0.05


def test_mrope_keeps_bfloat16():
    x = normal((1, 8, 2, 128), seed=8)
    got = apply_qwen2_vl(x.astype(jnp.bfloat16), jnp.asarray(IMAGE_POSITIONS))
    assert got.dtype == jnp.bfloat16
    reference = apply_qwen2_vl(x, jnp.asarray(IMAGE_POSITIONS))
    atol = 4 * float(jnp.finfo(jnp.bfloat16).eps) * float(np.max(np.abs(x)))
    np.testing.assert_allclose(np.asarray(got, np.float32), reference, atol=atol)


MROPE_BAD_INPUTS = [
    (
        (2, 8, 2, 128),
        (3, 2, 8),
        (16, 24, 20),
        ValueError,
        r"`mrope_section` must sum to",
    ),
    ((2, 8, 2, 128), (3, 2, 8), (16, 24, 0, 24), ValueError, r"mrope_section\[2\]"),
    ((2, 8, 2, 128), (3, 2, 8), (16, 24.0, 24), TypeError, r"mrope_section\[1\]"),
    ((2, 8, 2, 128), (3, 2, 8), 64, TypeError, "`mrope_section`"),
    ((2, 8, 2, 128), (2, 8), (16, 24, 24), ValueError, "`positions` must be"),
    (
        (2, 8, 2, 128),
        (3, 2, 5),
        (16, 24, 24),
        ValueError,
        r"must be \[A, \.\.\., L\] with L = x.shape\[-3\] = 8",
    ),
    ((2, 8, 2, 64), (3, 2, 8), (16, 24, 24), ValueError, "`x`"),
]
MROPE_BAD_LAYOUTS = [
    ((22, 20, 22), "hw_alternating", "s_h == s_w"),
    ((16, 24, 24), "spiral", "`mrope_layout` must be one of"),
    ((16, 16, 16), "xd", "sum to"),
]


@pytest.mark.parametrize(("section", "mrope_layout", "match"), MROPE_BAD_LAYOUTS)
def test_mrope_rejects_bad_layouts(section, mrope_layout, match):
    with pytest.raises(ValueError, match=match):
        fp.apply_mrope(
            jnp.zeros((1, 8, 2, 128)),
            jnp.zeros((len(section), 1, 8), jnp.int32),
            QWEN2_VL,
            mrope_section=section,
            mrope_layout=mrope_layout,
        )


def test_xd_rope_needs_the_half_layout():
    config = fp.RopeConfig(head_dim=16, theta=1e4, layout="interleaved")
    with pytest.raises(ValueError, match=r"config\.layout must be 'half'"):
        fp.apply_mrope(
            jnp.zeros((1, 4, 1, 16)),
            jnp.zeros((2, 1, 4), jnp.int32),
            config,
            mrope_section=(4, 4),
            mrope_layout="xd",
        )


@pytest.mark.parametrize(
    ("x_shape", "positions_shape", "section", "error", "match"), MROPE_BAD_INPUTS
)
def test_mrope_rejects_bad_inputs(x_shape, positions_shape, section, error, match):
    positions = jnp.zeros(positions_shape, jnp.int32)
    with pytest.raises(error, match=match):
        fp.apply_mrope(jnp.zeros(x_shape), positions, QWEN2_VL, mrope_section=section)


def test_mrope_rejects_float_positions():
    with pytest.raises(TypeError, match="`positions`"):
        fp.mrope_cos_sin(jnp.zeros((3, 8)), QWEN2_VL, mrope_section=QWEN2_VL_SECTION)
