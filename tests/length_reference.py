"""float64 transcriptions of the length-generalisation papers' equations, and an
adapter that lets ``testing.assert_shift_invariance`` check an attention bias.

Shared by tests/test_kerple.py, test_fire.py, test_cope.py, test_self_extend.py and
test_dual_chunk.py. Nothing here imports the code under test.
"""

from __future__ import annotations

import numpy as np


def softplus(x):
    return np.logaddexp(0.0, np.asarray(x, np.float64))


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-np.asarray(x, np.float64)))


def kerple(q_pos, k_pos, r1, r2, kernel):
    """Chi et al. 2022, Sec. 4: logarithmic -r1 log(1 + r2 |m - n|) and power
    -r1 |m - n|^r2; [N, L, S] from [L], [S] and the *constrained* r1, r2 [N]."""
    d = np.abs(np.asarray(q_pos, np.float64)[:, None] - np.asarray(k_pos)[None, :])
    r1, r2 = (np.asarray(r, np.float64)[:, None, None] for r in (r1, r2))
    if kernel == "log":
        return -r1 * np.log(1.0 + r2 * d)
    return -r1 * d**r2  # 0 ** r2 = 0 for r2 > 0


def fire(q_pos, k_pos, c, threshold, w1, b1, w2, b2, eps=1e-6):
    """Li et al. 2023, eq. 3 with progressive interpolation: f(psi(i - j) /
    psi(max(L, i))), psi(x) = log(c x + 1), f a ReLU MLP 1 -> W -> N. [N, L, S]."""
    q = np.asarray(q_pos, np.float64)
    i, j = q[:, None], np.asarray(k_pos, np.float64)[None, :]
    c = abs(float(c))
    psi = lambda x: np.log(c * x + 1.0)
    u = psi(np.abs(i - j)) / (psi(np.maximum(abs(float(threshold)), i)) + eps)
    hidden = np.maximum(u[..., None] * np.float64(w1) + np.float64(b1), 0.0)
    out = hidden @ np.asarray(w2, np.float64) + np.asarray(b2, np.float64)
    return np.moveaxis(out, -1, 0)


def cope(q, k, pos_emb, q_pos, k_pos, scale):
    """Golovneva et al. 2024, eqs. 3-5: g_ij = sigmoid(q_i . k_j) (times the
    authors' scale), p_ij = sum_{t=j}^{i} g_it, e[p] interpolated; returns
    q_i . e[p_ij], [N, L, S], for q [L, N, H], k [S, N, H], pos_emb [P, H], loops
    written out per pair."""
    q, k, e = (np.asarray(x, np.float64) for x in (q, k, pos_emb))
    length, heads, _ = q.shape
    out = np.zeros((heads, length, k.shape[0]))
    for h in range(heads):
        for i in range(length):
            seen = [t for t in range(k.shape[0]) if k_pos[t] <= q_pos[i]]
            gate = {t: sigmoid(scale * q[i, h] @ k[t, h]) for t in seen}
            for j in seen:
                p = min(sum(gate[t] for t in seen if t >= j), e.shape[0] - 1)
                lo, hi = int(np.floor(p)), int(np.ceil(p))
                emb = (p - lo) * e[hi] + (1 - (p - lo)) * e[lo]
                out[h, i, j] = q[i, h] @ emb
    return out


def attention(q, k, v, logits_bias, allowed, scale):
    """float64 softmax attention of q [L, N, H], k/v [S, N, H] with logits
    ``scale * q.k + logits_bias`` [N, L, S] over the ``allowed`` pairs."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    logits = scale * np.einsum("lnh,snh->nls", q, k) + logits_bias
    logits = np.where(allowed, logits, -np.inf)
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    return np.einsum("nls,snh->lnh", weights, v)


class BiasAsRotation:
    """A bias ``b(q_pos, k_pos) [N, L, S]`` written as the scores of a "rotation",
    so that ``testing.assert_shift_invariance`` (which compares ``q'(p) . k'(p)``
    before and after shifting every position) can check it.

    The helper calls ``rotate`` on q (``N`` heads) and k (one head). For the finite
    set of positions the check visits, q at position ``m`` becomes, in head ``h``,
    the row ``b_h(m, .)`` over those positions (in block ``h`` of ``N * P``
    features), and k at position ``l`` the one-hot of ``l`` in every block, so
    ``q'_m . k'_l = b_h(m, l)`` exactly.
    """

    def __init__(self, bias_fn, positions, heads):
        self.values = np.asarray(sorted(set(int(p) for p in positions)), np.int64)
        self.index = {int(p): i for i, p in enumerate(self.values)}
        self.heads = heads
        table = np.asarray(bias_fn(self.values, self.values), np.float64)  # [N, P, P]
        self.table = table

    @property
    def features(self):
        return self.heads * len(self.values)

    def __call__(self, x, positions):
        positions = np.asarray(positions)
        size = len(self.values)
        out = np.zeros(x.shape, np.float64)
        for t, p in enumerate(positions.tolist()):
            i = self.index[p]
            if x.shape[-2] == self.heads:  # q
                for h in range(self.heads):
                    out[t, h, h * size : (h + 1) * size] = self.table[h, i]
            else:  # k: one head, one-hot per block
                for h in range(self.heads):
                    out[t, 0, h * size + i] = 1.0
        return np.asarray(out, np.float32) if x.dtype == np.float32 else out


def rope_half(x, positions, theta=10000.0):
    """float64 RoPE, rotate-half layout: x [L, N, H] at integer positions [L]."""
    x = np.asarray(x, np.float64)
    half = x.shape[-1] // 2
    inv_freq = theta ** (-np.arange(half, dtype=np.float64) * 2 / x.shape[-1])
    angle = np.asarray(positions, np.float64)[:, None] * inv_freq[None]
    cos, sin = np.cos(angle)[:, None], np.sin(angle)[:, None]
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def self_extend(q, k, v, positions, group_size, window, scale):
    """Jin et al. 2024 (the authors' non-flash forward): neighbour logits of q, k at
    their positions, grouped logits of q at i // G + W - W // G and k at j // G;
    grouped where i - j >= W (their mask), causal softmax."""
    p = np.asarray(positions)
    neighbour = np.einsum("lnh,snh->nls", rope_half(q, p), rope_half(k, p))
    shift = window - window // group_size
    grouped = np.einsum(
        "lnh,snh->nls",
        rope_half(q, p // group_size + shift),
        rope_half(k, p // group_size),
    )
    far = (p[:, None] - p[None, :]) >= window
    logits = np.where(far[None], grouped, neighbour)
    causal = p[None, :] <= p[:, None]
    return attention(np.zeros_like(q), k, v, scale * logits, causal[None], 0.0)


def vllm_dual_chunk(q, k, v, positions, chunk_size, local_size, original, theta=1e4):
    """vLLM's dual chunk attention, transcribed: ``DualChunkRotaryEmbedding``'s
    caches (q_t = arange(c), qc_t = clamp(arange(c) + c, max=chunk_size), k_t =
    arange(max_pos) % c; query at q_t[p % c], succ at qc_t[p % c], inter at
    qc_t[c - 1], key at k_t[p]) and the prefill loop over query chunks: intra keys
    [chunk start, end) causal, succ keys [start - c, start), inter keys [0, start -
    c), merged by one softmax; softmax scale times max(1, 0.1 ln(L / original) + 1).
    q/k/v [L, N, H] at positions 0..L-1."""
    length = len(positions)
    c = chunk_size - local_size
    q_t = np.arange(c, dtype=np.float64)
    qc_t = np.minimum(np.arange(c, dtype=np.float64) + c, chunk_size)
    k_t = np.arange(length, dtype=np.float64) % c
    p = np.asarray(positions)
    query = rope_half(q, q_t[p % c], theta)
    query_succ = rope_half(q, qc_t[p % c], theta)
    query_inter = rope_half(q, np.full(length, qc_t[c - 1]), theta)
    key = rope_half(k, k_t[p], theta)
    scale = 1 / np.sqrt(q.shape[-1])
    if original > 0:
        scale *= max(0.1 * np.log(length / original) + 1.0, 1.0)
    out = np.zeros(q.shape[:2] + v.shape[-1:])
    begin = 0
    while begin < length:
        start = (begin // c) * c
        end = min(start + c, length)
        for i in range(begin, end):
            pieces = []  # (logits [N, keys], values [keys, N, H])
            keys = np.arange(start, i + 1)
            pieces.append((np.einsum("nh,snh->ns", query[i], key[keys]), v[keys]))
            if start - c >= 0:
                keys = np.arange(start - c, start)
                pieces.append(
                    (np.einsum("nh,snh->ns", query_succ[i], key[keys]), v[keys])
                )
            if start - 2 * c >= 0:
                keys = np.arange(0, start - c)
                pieces.append(
                    (np.einsum("nh,snh->ns", query_inter[i], key[keys]), v[keys])
                )
            logits = np.concatenate([s for s, _ in pieces], axis=-1) * scale
            values = np.concatenate([val for _, val in pieces], axis=0)
            w = np.exp(logits - logits.max(-1, keepdims=True))
            w /= w.sum(-1, keepdims=True)
            out[i] = np.einsum("ns,snh->nh", w, values)
        begin = end
    return out
