# Emulates the full-width scan's (gdn_chunk_scan_full_bf16, gdn_chunked_full.cu)
# per-warp index math (m0, n0, hrow0, hcol0, k-step skips) and rounding
# points, as first written on mma.sync in session 13, on top of the prep's outputs
# (computed here in f64/f32 as the prep defines them), against the f64
# recurrent rule. Lane-level fragment helpers are not emulated (copies of
# verified ones); each warp's 16 x 8 n8 tiles are computed as numpy blocks.
import numpy as np
rng = np.random.default_rng(1)
BT, DK, DV = 64, 128, 128

def bf16(x):
    x = np.asarray(x, np.float32)
    b = x.view(np.uint32).astype(np.uint64)
    r = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16
    return r.astype(np.uint32).view(np.float32)

def reference(q, k, v, g, beta, S):
    S = S.astype(np.float64).copy()
    out = np.zeros((len(q), DV))
    for t in range(len(q)):
        qn = q[t] / np.sqrt((q[t].astype(np.float64) ** 2).sum() + 1e-6) / np.sqrt(DK)
        kn = k[t] / np.sqrt((k[t].astype(np.float64) ** 2).sum() + 1e-6)
        S *= np.exp(g[t])
        delta = (v[t] - kn @ S) * beta[t]
        S += np.outer(kn, delta)
        out[t] = qn @ S
    return out, S

def prep(q, k, g, beta, nrows):
    # lite prep outputs for one chunk (rows past nrows zero), rounding as the prep does
    Q = np.zeros((BT, DK), np.float32); K = np.zeros((BT, DK), np.float32)
    Q[:nrows] = q; K[:nrows] = k
    G = np.zeros(BT); B = np.zeros(BT)
    G[:nrows] = np.cumsum(g); G[nrows:] = G[nrows - 1] if nrows else 0
    B[:nrows] = beta
    # cumsum with padded g = 0 -> padded G = G_last
    iq = 1 / np.sqrt((Q.astype(np.float64) ** 2).sum(1) + 1e-6) / np.sqrt(DK)
    ik = 1 / np.sqrt((K.astype(np.float64) ** 2).sum(1) + 1e-6)
    qh = bf16(Q * iq[:, None]); kh = bf16(K * ik[:, None])
    GL = G[BT - 1]
    D = np.exp(G[:, None] - G[None, :])
    i, j = np.indices((BT, BT))
    A = np.where(j < i, B[:, None] * D * (kh.astype(np.float64) @ kh.T), 0)
    P = bf16(np.where(j <= i, D * (qh.astype(np.float64) @ kh.T), 0))
    T = np.linalg.inv(np.eye(BT) + A)
    Tb = bf16(T * B[None, :])
    ok = np.arange(BT) < nrows
    qf = np.where(ok, iq * np.exp(G), 0); kf = np.where(ok, ik * np.exp(GL - G), 0)
    ef = np.where(ok, ik * np.exp(G), 0)
    return Q, K, P, Tb, qf.astype(np.float32), kf.astype(np.float32), ef.astype(np.float32), np.float32(np.exp(GL))

def fused(q, k, v, g, beta, S0):
    rows = len(q); nch = (rows + BT - 1) // BT
    acc_h = S0.astype(np.float32).copy()
    out = np.full((rows, DV), np.nan, np.float32)
    for lc in range(nch):
        r0 = lc * BT; nrows = min(BT, rows - r0)
        Q, K, P, Tb, qf, kf, ef, egl = prep(q[r0:r0 + nrows], k[r0:r0 + nrows], g[r0:r0 + nrows], beta[r0:r0 + nrows], nrows)
        V = np.zeros((BT, DV), np.float32); V[:nrows] = v[r0:r0 + nrows]
        Tb_loaded = np.full_like(Tb, np.nan)  # blocks above the diagonal are not loaded
        for r in range(BT):
            for ch in range(0, BT, 8):
                if (ch >> 4) <= (r >> 4): Tb_loaded[r, ch:ch + 8] = Tb[r, ch:ch + 8]
        HT = bf16(acc_h).T.copy()  # [DV][DK]
        Y = V.copy(); ao = np.zeros((BT, DV), np.float32); written = np.zeros((BT, DV), int)
        for warp in range(16):  # phase 1 + epilogue 1
            mb = warp & 3; m0 = 16 * mb; cg = warp >> 2; n0 = 4 * cg
            for nt in range(4):
                c = 8 * (n0 + nt); rs = slice(m0, m0 + 16); cs = slice(c, c + 8)
                ks_ = K[rs].astype(np.float32) @ HT[cs].T
                qs_ = Q[rs].astype(np.float32) @ HT[cs].T
                Y[rs, cs] = bf16(V[rs, cs] - ef[rs, None] * ks_)
                ao[rs, cs] = qs_ * qf[rs, None]
                written[rs, cs] += 1
        assert (written == 1).all()
        VN = np.zeros((DV, BT), np.float32); VK = np.zeros((DV, BT), np.float32); written[:] = 0
        for warp in range(16):  # phase 1b
            mb = warp & 3; m0 = 16 * mb; cg = warp >> 2; n0 = 4 * cg
            for nt in range(4):
                c = 8 * (n0 + nt); rs = slice(m0, m0 + 16); cs = slice(c, c + 8)
                ad = np.zeros((16, 8), np.float32)
                for ks in range(4):
                    if ks <= mb:
                        ad += Tb_loaded[rs, 16 * ks:16 * ks + 16] @ Y[16 * ks:16 * ks + 16, cs]
                VN[cs, rs] = bf16(ad).T; VK[cs, rs] = bf16(ad * kf[rs, None]).T
                written[rs, cs] += 1
        assert (written == 1).all() and not np.isnan(VN).any()
        for warp in range(16):  # phase 2a
            mb = warp & 3; m0 = 16 * mb; cg = warp >> 2; n0 = 4 * cg
            for nt in range(4):
                c = 8 * (n0 + nt); rs = slice(m0, m0 + 16); cs = slice(c, c + 8)
                for ks in range(4):
                    if ks <= mb:
                        ao[rs, cs] += P[rs, 16 * ks:16 * ks + 16] @ VN[cs, 16 * ks:16 * ks + 16].T
        out[r0:r0 + nrows] = bf16(ao[:nrows])
        new_h = np.zeros_like(acc_h); cover = np.zeros(acc_h.shape, int)
        for warp in range(16):  # phase 2b
            hrow0 = 16 * (warp & 7); hcol0 = 64 * (warp >> 3)
            rs = slice(hrow0, hrow0 + 16); cs = slice(hcol0, hcol0 + 64)
            a = acc_h[rs, cs] * egl
            for ks in range(4):
                a = a + K[16 * ks:16 * ks + 16, rs].T @ VK[cs, 16 * ks:16 * ks + 16].T
            new_h[rs, cs] = a; cover[rs, cs] += 1
        assert (cover == 1).all()
        acc_h = new_h
    return out, acc_h

def rel(a, b):
    return np.sqrt(((a - b) ** 2).sum() / (b ** 2).sum())

for rows, rate in [(37, -5.0), (64, -2.0), (65, -1.0), (129, -3.0), (300, -0.5), (300, -5.0)]:
    q = bf16(rng.standard_normal((rows, DK))); k = bf16(rng.standard_normal((rows, DK)))
    v = bf16(rng.standard_normal((rows, DV)))
    g = (-np.exp(rate) * np.log1p(np.exp(rng.standard_normal(rows)))).astype(np.float32)
    beta = (1 / (1 + np.exp(-rng.standard_normal(rows)))).astype(np.float32)
    S0 = (0.5 * rng.standard_normal((DK, DV))).astype(np.float32)
    want_o, want_s = reference(q, k, v, g, beta, S0)
    got_o, got_s = fused(q, k, v, g, beta, S0)
    print(f"rows {rows} rate e^{rate}: out {rel(got_o, want_o):.2e} state {rel(got_s, want_s):.2e}")
