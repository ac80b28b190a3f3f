"""Misspelt RoPE keys: the top-level keys whose near misses the reader refuses.

transformers ignores a top-level key its config class does not know, so
``rope_scalling`` or ``rope_thetta`` silently give plain RoPE at the class default.
A key one or two edits from a RoPE key is almost surely such a typo; the reader
refuses it, naming the key it resembles, unless it is itself an attribute of some
config class (``_defaults.NEAR_TYPO_CHECKED``, written by the defaults generator,
which loads this file by path: it imports only the standard library).
"""

import functools

TYPO_CHECKED = (
    "compress_rope_theta",
    "global_head_dim",
    "layer_rope_theta",
    "layer_types",
    "max_position_embeddings",
    "no_rope_layers",
    "original_max_position_embeddings",
    "partial_rotary_factor",
    "qk_rope_head_dim",
    "rope_interleave",
    "rope_local_base_freq",
    "rope_parameters",
    "rope_scaling",
    "rope_theta",
    "rotary_dim",
    "rotary_emb_base",
    "rotary_pct",
)
"""Top-level keys that set RoPE, whose misspellings are refused."""

MAX_EDITS = 2


def edit_distance(a: str, b: str) -> int:
    """Optimal string alignment distance: insertions, deletions, substitutions and
    swaps of neighbours, one edit each."""
    rows = [list(range(len(b) + 1))]
    for i in range(1, len(a) + 1):
        row = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            row[j] = min(
                rows[-1][j] + 1,
                row[j - 1] + 1,
                rows[-1][j - 1] + (a[i - 1] != b[j - 1]),
            )
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                row[j] = min(row[j], rows[-2][j - 2] + 1)
        rows.append(row)
    return rows[-1][-1]


@functools.cache
def resembled(key: str) -> str | None:
    """The RoPE key ``key`` is one or two edits from, or None. Keys whose lengths
    differ by more than ``MAX_EDITS`` are never compared (their distance is at
    least that difference); a config's keys repeat across reads, so answers are
    cached."""
    if key in TYPO_CHECKED:
        return None
    near = [
        (edit_distance(key, k), k)
        for k in TYPO_CHECKED
        if abs(len(key) - len(k)) <= MAX_EDITS
    ]
    distance, closest = min(near, default=(MAX_EDITS + 1, None))
    return closest if distance <= MAX_EDITS else None
