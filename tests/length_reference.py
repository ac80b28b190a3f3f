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
