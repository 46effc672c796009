/* Optional compiled loops for a recurrent core's unroll on the CPU (zoo.accel.recurrent_scan): one LSTM or GRU
 * layer over T steps of B sequences, its memory reset inside the loop at every episode start (keep[t, b] = 0 zeroes
 * the state just before step t), forward and backward.
 *
 * The weight gradients are single large products, done by torch after the backward, and so is the input projection
 * (x @ W_ih^T + biases) before the forward for wide inputs; for a few input features the forward takes x and
 * projects each step itself. What runs here is the sequential part: per step, the recurrent product h @ W_hh^T and
 * the gates.
 * torch's fused kernels take no per-step reset, so without these loops an unroll whose episodes start inside its
 * sequences runs as padded segments (zoo.policies.recurrent.Segments) or step by step.
 *
 * Arrays are float32, C-contiguous, passed as addresses (tensor.data_ptr()) with their sizes: the Python wrapper
 * (recurrent_kernels.py) allocates and checks every one; nothing here is called from elsewhere. Layouts:
 *   LSTM gates in torch's order i, f, g, o (G = 4H); GRU in r, z, n (G = 3H).
 *   xproj (T, B, G) rows S apart (S >= G: several cores' projections side by side), and so dgates / dx; or x
 *   (T, B, K) with w_in (K, G) = W_ih transposed and bias (G);
 *   w_t (H, G) = W_hh transposed (forward); w (G, H) = W_hh (backward); keep (T, B);
 *   state (B, H) in and out; per-step records (T, B, ...) for the backward.
 * Built by `pip install` where a C compiler is available (setup.py marks it optional); on x86-64 with GCC each loop is
 * also compiled for AVX2+FMA and AVX-512 and picked at load time (target_clones; -DZOO_NO_CLONES builds one version,
 * for the flags given, e.g. to test the AVX2 or the baseline code on a machine that would pick another).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && __GNUC__ >= 12 && !defined(ZOO_NO_CLONES)
#define ZOO_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define ZOO_CLONES
#endif

/* The loops' helpers are inlined into each clone (a helper left out of line would be compiled for the baseline ISA). */
#if defined(__GNUC__)
#define ZOO_INLINE static inline __attribute__((always_inline))
#else
#define ZOO_INLINE static inline
#endif

/* exp(x) for float32 to about 2 ulp, without branches or calls so that the gate loops vectorise (Cephes' expf:
 * 2^n exp(r), n the nearest integer to x / ln 2 by the 1.5 * 2^23 rounding trick, r = x - n ln 2 in two parts). */
ZOO_INLINE float zexp(float x) {
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = x - n * 0.693359375f;
    r = r + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    union {
        int32_t i;
        float f;
    } scale = {.i = ((int32_t)n + 127) << 23};
    return p * scale.f;
}

ZOO_INLINE float zsigmoid(float x) { return 1.0f / (1.0f + zexp(-x)); }

/* tanh(x) = sign(x) (1 - 2 / (exp(2|x|) + 1)): absolute error about 1e-7. */
ZOO_INLINE float ztanh(float x) { return copysignf(1.0f - 2.0f / (zexp(2.0f * fabsf(x)) + 1.0f), x); }

/* out (B, N) += a (B, K) @ w (K, N), the one product of both directions (forward: h @ W_hh^T; backward: the gates'
 * gradient @ W_hh). Tiles of ZR rows x ZS columns are held in accumulators while k runs (every w row loaded once per
 * tile and used for ZR rows, no stores inside the k loop: about 3x the plain order's speed at B = 8, H = 64); rows
 * left over go one at a time, columns left over (N % ZS) by the plain order. Each output element sums its k terms in
 * order from its value on entry, whatever the tile. */
#define ZR 4
#define ZS 64

ZOO_INLINE void tile_rows4(const float *restrict a, Py_ssize_t lda, const float *restrict w, float *restrict out,
                           Py_ssize_t K, Py_ssize_t N, Py_ssize_t c0) {
    float acc[ZR][ZS];
    for (int r = 0; r < ZR; r++) {
        for (int i = 0; i < ZS; i++) {
            acc[r][i] = out[r * N + c0 + i];
        }
    }
    for (Py_ssize_t k = 0; k < K; k++) {
        const float *wr = w + k * N + c0;
        for (int r = 0; r < ZR; r++) {
            const float x = a[r * lda + k];
            for (int i = 0; i < ZS; i++) {
                acc[r][i] += x * wr[i];
            }
        }
    }
    for (int r = 0; r < ZR; r++) {
        for (int i = 0; i < ZS; i++) {
            out[r * N + c0 + i] = acc[r][i];
        }
    }
}

ZOO_INLINE void tile_row1(const float *restrict a, const float *restrict w, float *restrict out, Py_ssize_t K,
                          Py_ssize_t N, Py_ssize_t c0) {
    float acc[ZS];
    for (int i = 0; i < ZS; i++) {
        acc[i] = out[c0 + i];
    }
    for (Py_ssize_t k = 0; k < K; k++) {
        const float x = a[k];
        const float *wr = w + k * N + c0;
        for (int i = 0; i < ZS; i++) {
            acc[i] += x * wr[i];
        }
    }
    for (int i = 0; i < ZS; i++) {
        out[c0 + i] = acc[i];
    }
}

ZOO_INLINE void gemm_acc(const float *restrict a, Py_ssize_t lda, const float *restrict w, float *restrict out,
                         Py_ssize_t B, Py_ssize_t K, Py_ssize_t N) {
    const Py_ssize_t whole = N - N % ZS;
    for (Py_ssize_t b = 0; b < B; b += ZR) {
        const Py_ssize_t rows = B - b < ZR ? B - b : ZR;
        for (Py_ssize_t c0 = 0; c0 < whole; c0 += ZS) {
            if (rows == ZR) {
                tile_rows4(a + b * lda, lda, w, out + b * N, K, N, c0);
            } else {
                for (Py_ssize_t r = 0; r < rows; r++) {
                    tile_row1(a + (b + r) * lda, w, out + (b + r) * N, K, N, c0);
                }
            }
        }
        for (Py_ssize_t r = 0; r < rows; r++) {  /* the columns left over */
            const float *ar = a + (b + r) * lda;
            float *o = out + (b + r) * N;
            for (Py_ssize_t k = 0; k < K; k++) {
                const float x = ar[k];
                const float *wr = w + k * N;
                for (Py_ssize_t j = whole; j < N; j++) {
                    o[j] += x * wr[j];
                }
            }
        }
    }
}

/* out (B, G) = bias (G) + x (B, K) @ w_in (K, G): the input projection of one step, taken inside the loop (inputs of
 * a few features: no (T, B, G) projection made and read back). */
ZOO_INLINE void input_part(const float *x, const float *w_in, const float *bias, float *out, Py_ssize_t B,
                           Py_ssize_t K, Py_ssize_t G) {
    for (Py_ssize_t b = 0; b < B; b++) {
        memcpy(out + b * G, bias, (size_t)G * sizeof(float));
    }
    gemm_acc(x, K, w_in, out, B, K, G);
}

/* out (B, G) = the input part + h (B, H) @ w_t (H, G). The input part: where x is given, input_part's; else the rows
 * of in (G of each, S apart: the projection made before the loop, biases included); else zeros. */
ZOO_INLINE void add_product(const float *in, Py_ssize_t S, const float *x, const float *w_in, const float *bias,
                            Py_ssize_t K, const float *h, const float *w_t, float *out, Py_ssize_t B, Py_ssize_t H,
                            Py_ssize_t G) {
    if (x != NULL) {
        input_part(x, w_in, bias, out, B, K, G);
    } else if (in == NULL) {
        memset(out, 0, (size_t)(B * G) * sizeof(float));
    } else {
        for (Py_ssize_t b = 0; b < B; b++) {
            memcpy(out + b * G, in + b * S, (size_t)G * sizeof(float));
        }
    }
    gemm_acc(h, H, w_t, out, B, H, G);
}

/* dst (C, R) = src (R, C) transposed, in blocks of 16 x 16, each written a row of dst at a time (W_hh to the
 * forward's W_hh^T). */
static void transpose(const float *restrict src, float *restrict dst, Py_ssize_t R, Py_ssize_t C) {
    for (Py_ssize_t r0 = 0; r0 < R; r0 += 16) {
        const Py_ssize_t r1 = r0 + 16 < R ? r0 + 16 : R;
        for (Py_ssize_t c0 = 0; c0 < C; c0 += 16) {
            const Py_ssize_t c1 = c0 + 16 < C ? c0 + 16 : C;
            for (Py_ssize_t c = c0; c < c1; c++) {
                for (Py_ssize_t r = r0; r < r1; r++) {
                    dst[c * R + r] = src[r * C + c];
                }
            }
        }
    }
}

/* out (B, H) += d (B rows of G, S apart) @ w (G, H). */
ZOO_INLINE void add_back_product(const float *restrict d, Py_ssize_t S, const float *restrict w, float *restrict out,
                                 Py_ssize_t B, Py_ssize_t H, Py_ssize_t G) {
    gemm_acc(d, S, w, out, B, G, H);
}

/* The state (B, H) times keep[b] (0 or 1) into out. */
ZOO_INLINE void reset_rows(const float *state, const float *keep, float *out, Py_ssize_t B, Py_ssize_t H) {
    for (Py_ssize_t b = 0; b < B; b++) {
        const float k = keep[b];
        for (Py_ssize_t i = 0; i < H; i++) {
            out[b * H + i] = state[b * H + i] * k;
        }
    }
}

/* The elementwise parts of a step, one row (one sequence) at a time, each array its own restrict pointer so that the
 * loops vectorise. */

/* LSTM: the new cell, its tanh and the output from the activated gates and the cell after the reset. */
ZOO_INLINE void lstm_cell(const float *restrict ig, const float *restrict fg, const float *restrict cg,
                          const float *restrict og, const float *restrict cp, float *restrict c,
                          float *restrict tc, float *restrict h, float *restrict out, Py_ssize_t H) {
    for (Py_ssize_t i = 0; i < H; i++) {
        const float cell = fg[i] * cp[i] + ig[i] * cg[i];
        const float tcell = ztanh(cell);
        const float hv = og[i] * tcell;
        c[i] = cell;
        tc[i] = tcell;
        h[i] = hv;
        out[i] = hv;
    }
}

/* LSTM backward: the pre-activation gates' gradients from the output's (dh + dout) and the cell's (dc, updated to
 * the gradient of the cell after the reset, before its keep). */
ZOO_INLINE void lstm_cell_back(const float *restrict ig, const float *restrict fg, const float *restrict cg,
                               const float *restrict og, const float *restrict tc, const float *restrict cp,
                               const float *restrict dout, const float *restrict dh, float *restrict dc,
                               float *restrict di, float *restrict df, float *restrict dg, float *restrict dO,
                               Py_ssize_t H) {
    for (Py_ssize_t i = 0; i < H; i++) {
        const float dhi = dh[i] + dout[i];
        const float dci = dc[i] + dhi * og[i] * (1.0f - tc[i] * tc[i]);
        di[i] = dci * cg[i] * ig[i] * (1.0f - ig[i]);
        df[i] = dci * cp[i] * fg[i] * (1.0f - fg[i]);
        dg[i] = dci * ig[i] * (1.0f - cg[i] * cg[i]);
        dO[i] = dhi * tc[i] * og[i] * (1.0f - og[i]);
        dc[i] = dci * fg[i];
    }
}

/* GRU: r, z, n and W_hn h + b_hn recorded, the new state and output, from the input part x and recurrent part rec. */
ZOO_INLINE void gru_cell(const float *restrict xr, const float *restrict xz, const float *restrict xn,
                         const float *restrict rr, const float *restrict rz, const float *restrict rn,
                         const float *restrict b_hn, const float *restrict hp, float *restrict pr,
                         float *restrict pz, float *restrict pn, float *restrict phn, float *restrict h,
                         float *restrict out, Py_ssize_t H) {
    for (Py_ssize_t i = 0; i < H; i++) {
        const float r = zsigmoid(xr[i] + rr[i]);
        const float z = zsigmoid(xz[i] + rz[i]);
        const float hn = rn[i] + b_hn[i];
        const float n = ztanh(xn[i] + r * hn);
        const float hv = n + z * (hp[i] - n);
        pr[i] = r;
        pz[i] = z;
        pn[i] = n;
        phn[i] = hn;
        h[i] = hv;
        out[i] = hv;
    }
}

/* GRU backward: the gradients of the input part (dx*), of the recurrent part (dr*) and of the state before the step
 * through z alone (direct). */
ZOO_INLINE void gru_cell_back(const float *restrict pr, const float *restrict pz, const float *restrict pn,
                              const float *restrict phn, const float *restrict hp, const float *restrict dout,
                              const float *restrict dh, float *restrict dxr, float *restrict dxz,
                              float *restrict dxn, float *restrict drr, float *restrict drz, float *restrict drn,
                              float *restrict direct, Py_ssize_t H) {
    for (Py_ssize_t i = 0; i < H; i++) {
        const float r = pr[i], z = pz[i], n = pn[i];
        const float dhi = dh[i] + dout[i];
        const float dn = dhi * (1.0f - z) * (1.0f - n * n);
        const float dr = dn * phn[i] * r * (1.0f - r);
        const float dz = dhi * (hp[i] - n) * z * (1.0f - z);
        dxr[i] = dr;
        dxz[i] = dz;
        dxn[i] = dn;
        drr[i] = dr;
        drz[i] = dz;
        drn[i] = dn * r;
        direct[i] = dhi * z;
    }
}

/* LSTM forward. The gates' input part: xproj, T x B rows of 4H, S apart (S = 4H, or wider where several cores'
 * projections sit side by side); or, where x (T, B, K) is given (xproj unused), bias (4H) + x @ w_in (K, 4H) step by
 * step. h, c (B, H): the state in, the state after the last step out. Records per step: hprev, cprev (the state
 * after the reset), gates (activated, T, B, 4H), tanhc (tanh of the new cell); out (T, B, H) the outputs. */
ZOO_CLONES
static void lstm_forward(const float *xproj, const float *x, const float *w_in, const float *bias, Py_ssize_t K,
                         const float *w_t, const float *keep, float *h, float *c, float *out, float *hprev,
                         float *cprev, float *gates, float *tanhc, Py_ssize_t T, Py_ssize_t B, Py_ssize_t H,
                         Py_ssize_t S) {
    const Py_ssize_t G = 4 * H, BH = B * H;
    for (Py_ssize_t t = 0; t < T; t++) {
        float *hp = hprev + t * BH, *cp = cprev + t * BH, *g = gates + t * B * G;
        reset_rows(h, keep + t * B, hp, B, H);
        reset_rows(c, keep + t * B, cp, B, H);
        add_product(xproj + t * B * S, S, x == NULL ? NULL : x + t * B * K, w_in, bias, K, hp, w_t, g, B, H,
                    G);
        for (Py_ssize_t b = 0; b < B; b++) {
            float *gb = g + b * G;
            for (Py_ssize_t i = 0; i < 2 * H; i++) {
                gb[i] = zsigmoid(gb[i]);
            }
            for (Py_ssize_t i = 2 * H; i < 3 * H; i++) {
                gb[i] = ztanh(gb[i]);
            }
            for (Py_ssize_t i = 3 * H; i < G; i++) {
                gb[i] = zsigmoid(gb[i]);
            }
            lstm_cell(gb, gb + H, gb + 2 * H, gb + 3 * H, cp + b * H, c + b * H, tanhc + t * BH + b * H, h + b * H,
                      out + t * BH + b * H, H);
        }
    }
}

/* LSTM backward. dout (T, B, H) the outputs' gradient; dh, dc (B, H): in, the gradient of the state after the last
 * step; out, of the state before the first (before its reset). dgates: T x B rows of 4H, S apart, the gradient of
 * the pre-activation gates (= of xproj). w (4H, H). */
ZOO_CLONES
static void lstm_backward(const float *dout, const float *w, const float *keep, const float *cprev,
                          const float *gates, const float *tanhc, float *dh, float *dc, float *dgates, float *scratch,
                          Py_ssize_t T, Py_ssize_t B, Py_ssize_t H, Py_ssize_t S) {
    const Py_ssize_t G = 4 * H, BH = B * H;
    for (Py_ssize_t t = T - 1; t >= 0; t--) {
        const float *g = gates + t * B * G, *tc = tanhc + t * BH, *cp = cprev + t * BH, *k = keep + t * B;
        float *d = dgates + t * B * S;
        for (Py_ssize_t b = 0; b < B; b++) {
            const float *gb = g + b * G;
            float *dgb = d + b * S;
            lstm_cell_back(gb, gb + H, gb + 2 * H, gb + 3 * H, tc + b * H, cp + b * H, dout + t * BH + b * H,
                           dh + b * H, dc + b * H, dgb, dgb + H, dgb + 2 * H, dgb + 3 * H, H);
        }
        memset(scratch, 0, (size_t)BH * sizeof(float));
        add_back_product(d, S, w, scratch, B, H, G);
        reset_rows(scratch, k, dh, B, H);
        reset_rows(dc, k, dc, B, H);
    }
}

/* GRU forward (torch's GRU: r, z from the input and recurrent parts summed, n = tanh(x_n + r * (W_hn h + b_hn)),
 * h' = (1 - z) n + z h). xproj (T x B rows of 3H, S apart) holds x @ W_ih^T + b_ih, plus b_hh for r and z; b_hn
 * (H) apart; or, where x (T, B, K) is given (xproj unused), that input part is bias + x @ w_in (K, 3H) step by step.
 * Records: hprev, parts (T, B, 4H): r, z, n and W_hn h + b_hn. scratch (2, B, 3H). */
ZOO_CLONES
static void gru_forward(const float *xproj, const float *x, const float *w_in, const float *bias, Py_ssize_t K,
                        const float *w_t, const float *b_hn, const float *keep, float *h, float *out, float *hprev,
                        float *parts, float *scratch, Py_ssize_t T, Py_ssize_t B, Py_ssize_t H, Py_ssize_t S) {
    const Py_ssize_t G = 3 * H, BH = B * H;
    float *inputs = scratch + B * G;
    for (Py_ssize_t t = 0; t < T; t++) {
        float *hp = hprev + t * BH;
        reset_rows(h, keep + t * B, hp, B, H);
        add_product(NULL, 0, NULL, NULL, NULL, 0, hp, w_t, scratch, B, H, G);
        if (x != NULL) {
            input_part(x + t * B * K, w_in, bias, inputs, B, K, G);
        }
        for (Py_ssize_t b = 0; b < B; b++) {
            const float *xb = x != NULL ? inputs + b * G : xproj + (t * B + b) * S, *rec = scratch + b * G;
            float *p = parts + (t * B + b) * 4 * H;
            gru_cell(xb, xb + H, xb + 2 * H, rec, rec + H, rec + 2 * H, b_hn, hp + b * H, p, p + H, p + 2 * H, p + 3 * H,
                     h + b * H, out + t * BH + b * H, H);
        }
    }
}

/* GRU backward. dh (B, H) as for the LSTM. dx (T x B rows of 3H, S apart): the gradient of xproj; drec (T, B, 3H):
 * of the recurrent part W_hh h (+ b_hn for n), from which the caller takes W_hh's and b_hn's gradients. w (3H, H). */
ZOO_CLONES
static void gru_backward(const float *dout, const float *w, const float *keep, const float *hprev,
                         const float *parts, float *dh, float *dx, float *drec, float *scratch, Py_ssize_t T,
                         Py_ssize_t B, Py_ssize_t H, Py_ssize_t S) {
    const Py_ssize_t G = 3 * H, BH = B * H;
    for (Py_ssize_t t = T - 1; t >= 0; t--) {
        for (Py_ssize_t b = 0; b < B; b++) {
            const float *p = parts + (t * B + b) * 4 * H;
            float *dxb = dx + (t * B + b) * S, *drb = drec + (t * B + b) * G;
            gru_cell_back(p, p + H, p + 2 * H, p + 3 * H, hprev + t * BH + b * H, dout + t * BH + b * H, dh + b * H,
                          dxb, dxb + H, dxb + 2 * H, drb, drb + H, drb + 2 * H, scratch + b * H, H);
        }
        add_back_product(drec + t * B * G, G, w, scratch, B, H, G);
        reset_rows(scratch, keep + t * B, dh, B, H);
    }
}

#define F(address) ((float *)(uintptr_t)(address))

static PyObject *py_lstm_forward(PyObject *self, PyObject *args) {
    unsigned long long xproj, x, w_in, bias, w_t, keep, h, c, out, hprev, cprev, gates, tanhc;
    Py_ssize_t K, T, B, H, S;
    if (!PyArg_ParseTuple(args, "KKKKnKKKKKKKKKnnnn", &xproj, &x, &w_in, &bias, &K, &w_t, &keep, &h, &c, &out, &hprev,
                          &cprev, &gates, &tanhc, &T, &B, &H, &S)) {
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    lstm_forward(F(xproj), F(x), F(w_in), F(bias), K, F(w_t), F(keep), F(h), F(c), F(out), F(hprev), F(cprev),
                 F(gates), F(tanhc), T, B, H, S);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *py_lstm_backward(PyObject *self, PyObject *args) {
    unsigned long long dout, w, keep, cprev, gates, tanhc, dh, dc, dgates, scratch;
    Py_ssize_t T, B, H, S;
    if (!PyArg_ParseTuple(args, "KKKKKKKKKKnnnn", &dout, &w, &keep, &cprev, &gates, &tanhc, &dh, &dc, &dgates,
                          &scratch, &T, &B, &H, &S)) {
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    lstm_backward(F(dout), F(w), F(keep), F(cprev), F(gates), F(tanhc), F(dh), F(dc), F(dgates), F(scratch), T, B, H,
                  S);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *py_gru_forward(PyObject *self, PyObject *args) {
    unsigned long long xproj, x, w_in, bias, w_t, b_hn, keep, h, out, hprev, parts, scratch;
    Py_ssize_t K, T, B, H, S;
    if (!PyArg_ParseTuple(args, "KKKKnKKKKKKKKnnnn", &xproj, &x, &w_in, &bias, &K, &w_t, &b_hn, &keep, &h, &out, &hprev,
                          &parts, &scratch, &T, &B, &H, &S)) {
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    gru_forward(F(xproj), F(x), F(w_in), F(bias), K, F(w_t), F(b_hn), F(keep), F(h), F(out), F(hprev), F(parts),
                F(scratch), T, B, H, S);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *py_gru_backward(PyObject *self, PyObject *args) {
    unsigned long long dout, w, keep, hprev, parts, dh, dx, drec, scratch;
    Py_ssize_t T, B, H, S;
    if (!PyArg_ParseTuple(args, "KKKKKKKKKnnnn", &dout, &w, &keep, &hprev, &parts, &dh, &dx, &drec, &scratch, &T, &B,
                          &H, &S)) {
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    gru_backward(F(dout), F(w), F(keep), F(hprev), F(parts), F(dh), F(dx), F(drec), F(scratch), T, B, H, S);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *py_transpose(PyObject *self, PyObject *args) {
    unsigned long long src, dst;
    Py_ssize_t R, C;
    if (!PyArg_ParseTuple(args, "KKnn", &src, &dst, &R, &C)) {
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    transpose(F(src), F(dst), R, C);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"lstm_forward", py_lstm_forward, METH_VARARGS,
     "lstm_forward(xproj, x, w_in, bias, K, w_t, keep, h, c, out, hprev, cprev, gates, tanhc, T, B, H, S): "
     "addresses and sizes (S: the row stride of xproj; x, w_in, bias 0 where xproj holds the input part, else xproj "
     "0)."},
    {"lstm_backward", py_lstm_backward, METH_VARARGS,
     "lstm_backward(dout, w, keep, cprev, gates, tanhc, dh, dc, dgates, scratch, T, B, H, S) (S: of dgates)."},
    {"gru_forward", py_gru_forward, METH_VARARGS,
     "gru_forward(xproj, x, w_in, bias, K, w_t, b_hn, keep, h, out, hprev, parts, scratch, T, B, H, S) (as "
     "lstm_forward)."},
    {"gru_backward", py_gru_backward, METH_VARARGS,
     "gru_backward(dout, w, keep, hprev, parts, dh, dx, drec, scratch, T, B, H, S) (S: of dx)."},
    {"transpose", py_transpose, METH_VARARGS, "transpose(src, dst, R, C): dst (C, R) = src (R, C) transposed."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_crecurrent",
                                    "Compiled LSTM and GRU loops with resets inside, for zoo.accel.recurrent_scan.", -1,
                                    methods};

/* Bumped whenever a signature or semantics above changes; recurrent_scan.py ignores a stale build. */
#define ZOO_CRECURRENT_VERSION 3

PyMODINIT_FUNC PyInit__crecurrent(void) {
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "VERSION", ZOO_CRECURRENT_VERSION) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
