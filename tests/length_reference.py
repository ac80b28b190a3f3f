"""float64 transcriptions of the length-generalisation papers' equations and of the
reference engines' code (vLLM's dual chunk attention, the PoSE authors' sampling).

Shared by tests/test_kerple.py, test_fire.py, test_cope.py, test_self_extend.py (with
dual chunk attention) and test_length_positions.py. Nothing here imports the code
under test.
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


def _vllm_factor(seq_len, original):
    """DualChunkFlashAttentionMetadata's ``scaling_factor`` for one sequence:
    0.1 ln(orig_seq_len / original) + 1, clipped below at 1; 1 when
    original_max_position_embeddings is 0 (vLLM then skips every multiply)."""
    if original <= 0:
        return 1.0
    return max(0.1 * np.log(seq_len / original) + 1.0, 1.0)


def _vllm_rotations(q, k, chunk_size, local_size, theta):
    """DualChunkRotaryEmbedding.forward_native for tokens at 0..T-1, from its
    caches: q_t = 0..c-1, qc_t = (0..c-1) + c clamped at chunk_size, k_t = p % c.
    Returns (query at q_t[p % c], query_succ at qc_t[p % c], query_inter at
    qc_t[c - 1] for every token, key at k_t[p])."""
    c = chunk_size - local_size
    p = np.arange(len(q))
    q_t = np.arange(c, dtype=np.float64)
    qc_t = np.minimum(np.arange(c, dtype=np.float64) + c, chunk_size)
    return (
        rope_half(q, q_t[p % c], theta),
        rope_half(q, qc_t[p % c], theta),
        rope_half(q, np.full(len(q), qc_t[c - 1]), theta),
        rope_half(k, p % c, theta),
    )


def _flash(q, k, v, softmax_scale, causal):
    """flash_attn_varlen_func(..., return_softmax_lse=True) on one sequence: q [l,
    N, H], k/v [s, N, H] -> (out [l, N, H], lse [N, l]); causal aligns the last
    query with the last key."""
    logits = softmax_scale * np.einsum("lnh,snh->nls", q, k)
    if causal:
        rows = np.arange(len(q))[:, None] + len(k) - len(q)
        logits = np.where(np.arange(len(k))[None, :] <= rows, logits, -np.inf)
    top = logits.max(-1, keepdims=True)
    weights = np.exp(logits - top)
    lse = np.log(weights.sum(-1)) + top[..., 0]
    out = np.einsum("nls,snh->lnh", weights / weights.sum(-1, keepdims=True), v)
    return out, lse


def _merge(pieces):
    """_merge_attn_outputs: the pieces' outputs weighted by softmax over their
    log-sum-exps."""
    outs = np.stack([out for out, _ in pieces])  # [P, l, N, H]
    lses = np.stack([lse for _, lse in pieces])  # [P, N, l]
    weights = np.exp(lses - lses.max(0))
    weights /= weights.sum(0)
    return np.einsum("pnl,plnh->lnh", weights, outs)


def _vllm_inputs(q, k, v, chunk_size, local_size, theta):
    """float64 q/k/v with k/v's heads repeated to q's (vLLM's ``head_id //
    group_size``) and the four rotations."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    return v, _vllm_rotations(q, k, chunk_size, local_size, theta)


def vllm_dual_chunk_prefill(q, k, v, chunk_size, local_size, original, theta=1e4):
    """vLLM's DualChunkFlashAttentionImpl on a prompt of T tokens at 0..T-1 (q [T,
    N, H], k/v [T, K, H]): forward() multiplies the keys by the prompt's factor
    before the cache write, _dual_chunk_flash_attn_prefill_func multiplies
    softmax_scale by it again, then per query chunk [begin, end): intra keys
    [start, end) causal, succ keys [start - c, start), inter keys [0, start - c),
    three flash calls merged by their log-sum-exps."""
    v, (query, query_succ, query_inter, key) = _vllm_inputs(
        q, k, v, chunk_size, local_size, theta
    )
    length, c = len(query), chunk_size - local_size
    factor = _vllm_factor(length, original)  # orig_seq_len = prompt_len
    key = key * factor
    softmax_scale = factor / np.sqrt(query.shape[-1])
    outputs, begin = [], 0
    while begin < length:
        start = begin // c * c
        end = min(start + c, length)
        rows = slice(begin, end)
        pieces = [
            _flash(query[rows], key[start:end], v[start:end], softmax_scale, True)
        ]
        if start - c >= 0:
            keys = slice(start - c, start)
            pieces.append(
                _flash(query_succ[rows], key[keys], v[keys], softmax_scale, False)
            )
        if start - 2 * c >= 0:
            keys = slice(0, start - c)
            pieces.append(
                _flash(query_inter[rows], key[keys], v[keys], softmax_scale, False)
            )
        outputs.append(_merge(pieces))
        begin = end
    return np.concatenate(outputs)


def vllm_dual_chunk_decode(
    q, k, v, prompt_len, chunk_size, local_size, original, theta=1e4
):
    """vLLM's decode path: a prefill of tokens 0..prompt_len-1 wrote their keys
    times the prompt's factor; then each token p >= prompt_len is one decode step
    with seq_len = max(prompt_len, p + 1) (the metadata builder's orig_seq_lens):
    its key is multiplied by that step's factor and cached, its three queries are
    multiplied by it (_dual_chunk_flash_attn_decoding; softmax_scale unscaled), and
    it reads intra keys [n c, seq_len), succ [(n - 1) c, n c) when n >= 1 and inter
    [0, (n - 1) c) when n >= 2, n = (seq_len - 1) // c, merged by log-sum-exp.
    Returns the outputs of tokens prompt_len..T-1."""
    v, (query, query_succ, query_inter, key) = _vllm_inputs(
        q, k, v, chunk_size, local_size, theta
    )
    c, softmax_scale = chunk_size - local_size, 1 / np.sqrt(query.shape[-1])
    cache = key.copy()
    cache[:prompt_len] *= _vllm_factor(prompt_len, original)
    outputs = []
    for p in range(prompt_len, len(query)):
        seq_len = max(prompt_len, p + 1)
        factor = _vllm_factor(seq_len, original)
        cache[p] = key[p] * factor
        n = (seq_len - 1) // c
        reads = [(query, n * c, seq_len)]
        if n >= 1:
            reads.append((query_succ, (n - 1) * c, n * c))
        if n >= 2:
            reads.append((query_inter, 0, (n - 1) * c))
        pieces = [
            _flash(qs[p : p + 1] * factor, cache[a:b], v[a:b], softmax_scale, False)
            for qs, a, b in reads
        ]
        outputs.append(_merge(pieces)[0])
    return np.stack(outputs)


def _pose_lengths(room, chunks):
    """(chunk lengths, probability) of PoSE's draws, one after another: each chunk
    l_i ~ U{1, ..., room left - chunks after it}, the last takes the rest (the
    paper's Figure 6 code: l0 = randint(1, Lc - 2), l1 = randint(1, Lc - l0 - 1),
    l2 = Lc - l0 - l1 for 3 chunks; l0 = randint(1, Lc - 1) for 2)."""
    if chunks == 1:
        yield (room,), 1.0
        return
    top = room - (chunks - 1)
    for size in range(1, top + 1):
        for rest, p in _pose_lengths(room - size, chunks - 1):
            yield (size,) + rest, p / top


def _pose_skips(low, top, count):
    """(skips, probability) of ``count`` skipping biases drawn one after another,
    u_i ~ U{u_{i-1}, ..., top} (eq. 4; Figure 6: u2 = randint(u1, Lt - Lc))."""
    if count == 0:
        yield (), 1.0
        return
    for u in range(low, top + 1):
        for rest, p in _pose_skips(u, top, count - 1):
            yield (u,) + rest, p / (top - low + 1)


def pose_distribution(length, max_len, num_chunks):
    """Zhu et al. 2023 (PoSE), exactly: {position tuple: probability} of a window
    of ``length`` tokens cut into ``num_chunks`` chunks, chunk i at its tokens'
    indices plus u_i, u_0 = 0 (eqs. 3-4), by enumerating every draw."""
    distribution = {}
    for sizes, p_sizes in _pose_lengths(length, num_chunks):
        for skips, p_skips in _pose_skips(0, max_len - length, num_chunks - 1):
            shift = np.repeat((0,) + skips, sizes)
            positions = tuple(int(x) for x in np.arange(length) + shift)
            distribution[positions] = (
                distribution.get(positions, 0.0) + p_sizes * p_skips
            )
    return distribution


def pose_sample(rng, length, max_len, num_chunks, count):
    """The same draws sampled with numpy (Python's inclusive randint as
    ``integers(..., endpoint=True)``): int64 [count, length]."""
    index = np.arange(length)
    start, skip = np.zeros(count, np.int64), np.zeros(count, np.int64)
    shift = np.zeros((count, length), np.int64)
    for i in range(num_chunks - 1):
        later = num_chunks - 1 - i
        start = start + rng.integers(1, length - start - later, endpoint=True)
        skip = rng.integers(skip, max_len - length, endpoint=True)
        shift = np.where(index >= start[:, None], skip[:, None], shift)
    return index + shift
