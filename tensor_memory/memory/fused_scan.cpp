// The ConvLSTM scan of update.py fused for the CPU (float32, channels-last): per chunk one pass builds the
// mix's input [dw_V(V) ; dw_h(h) ; 1], at::mm (MKL) makes the gate pre-activations, one pass makes the gates,
// c and h. The backward mirrors it: one pass of gate derivatives, the mix's two products, then one pass per
// sample through the write factors and the depthwise convolutions' adjoints. fused_scan.py builds and loads it.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

// The hot loops get AVX-512 and AVX2 copies, chosen when the library loads (lambdas would not inherit them);
// their arrays never overlap (__restrict__), which lets them vectorise.
#define HOT __attribute__((target_clones("avx512f", "avx2", "default")))

// exp(x) branch-free so loops vectorise: x = n·ln2 + r, |r| ≤ ln2/2, e^r by its Taylor series to r⁷
// (truncation below 1e-8 relative), 2^n by the exponent bits. ln2 is split in two for an exact n·ln2.
static inline float exp_approx(float x) {
  x = std::min(std::max(x, -87.0f), 88.0f);  // keeps 2^n a normal float
  const float shifter = 12582912.0f;  // 1.5·2^23: adding it rounds to an integer
  float n = (x * 1.44269504f + shifter) - shifter;
  float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;  // 0.693359375 − 2.12194440e-4 = ln2
  float p = 1.0f / 5040;
  p = p * r + 1.0f / 720; p = p * r + 1.0f / 120; p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6; p = p * r + 0.5f; p = p * r + 1.0f; p = p * r + 1.0f;
  int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

static inline float sigmoid_approx(float x) { return 1.0f / (1.0f + exp_approx(-x)); }

static inline float tanh_approx(float x) {  // (1 − e^{−2|x|}) / (1 + e^{−2|x|}) with x's sign
  float e = exp_approx(-2.0f * std::fabs(x));
  return std::copysign((1.0f - e) / (1.0f + e), x);
}

// One 3-tap correlation along the middle axis of (outer, n, J) rows of C channels, zero padded:
// out[z] = r[1]·in[z] + r[0]·in[z−1] + r[2]·in[z+1] (update.conv_axis's order); rows in_step/out_step apart.
HOT void conv_rows(const float* __restrict__ in, int64_t in_step, float* __restrict__ out, int64_t out_step, const float* __restrict__ r, int64_t outer,
                   int64_t n, int64_t J, int64_t C) {
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t z = 0; z < n; ++z)
      for (int64_t j = 0; j < J; ++j) {
        const float* x = in + ((o * n + z) * J + j) * in_step;
        float* y = out + ((o * n + z) * J + j) * out_step;
        for (int64_t c = 0; c < C; ++c) y[c] = x[c] * r[C + c];
        if (z > 0)
          for (int64_t c = 0; c < C; ++c) y[c] += x[c - J * in_step] * r[c];
        if (z + 1 < n)
          for (int64_t c = 0; c < C; ++c) y[c] += x[c + J * in_step] * r[2 * C + c];
      }
}

// The taps' gradient of conv_rows: acc[t·C + c] += Σ g[z]·in[z+t−1]; g's rows are g_step apart.
HOT void tap_grads(const float* __restrict__ g, const float* __restrict__ in, double* __restrict__ acc, int64_t outer, int64_t n, int64_t J, int64_t C,
                   int64_t g_step) {
  std::vector<float> sums(3 * C, 0.0f);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t z = 0; z < n; ++z)
      for (int64_t j = 0; j < J; ++j) {
        const float* gz = g + ((o * n + z) * J + j) * g_step;
        const float* x = in + ((o * n + z) * J + j) * C;
        for (int64_t c = 0; c < C; ++c) sums[C + c] += gz[c] * x[c];
        if (z > 0)
          for (int64_t c = 0; c < C; ++c) sums[c] += gz[c] * x[c - J * C];
        if (z + 1 < n)
          for (int64_t c = 0; c < C; ++c) sums[2 * C + c] += gz[c] * x[c + J * C];
      }
  for (int64_t i = 0; i < 3 * C; ++i) acc[i] += sums[i];
}

// The write half of x for one sample: x[d,h,w,c] = fz[d,c]·fy[h,c]·fxc[w,c], and the column of ones.
HOT void write_rows(const float* __restrict__ fz, const float* __restrict__ fy, const float* __restrict__ fxc, float* __restrict__ x, int64_t D, int64_t H, int64_t W,
                    int64_t C) {
  const int64_t step = 2 * C + 1;
  for (int64_t d = 0; d < D; ++d)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t w = 0; w < W; ++w) {
        float* row = x + ((d * H + h) * W + w) * step;
        for (int64_t c = 0; c < C; ++c) row[c] = fz[d * C + c] * fy[h * C + c] * fxc[w * C + c];
        row[2 * C] = 1.0f;
      }
}

// Gates in place of their pre-activations (M, 4C), then c = f·c_prev + i·g, tanh(c) and h = o·tanh(c).
HOT void gate_rows(float* __restrict__ gates, const float* __restrict__ c_prev, float* __restrict__ c, float* __restrict__ tanh_c, float* __restrict__ h, int64_t m0, int64_t m1,
                   int64_t C) {
  for (int64_t m = m0; m < m1; ++m) {
    float* p = gates + m * 4 * C;
    for (int64_t k = 0; k < C; ++k) {
      float i = sigmoid_approx(p[k]), f = sigmoid_approx(p[C + k]);
      float o = sigmoid_approx(p[2 * C + k]), g = tanh_approx(p[3 * C + k]);
      p[k] = i; p[C + k] = f; p[2 * C + k] = o; p[3 * C + k] = g;
      float cn = f * c_prev[m * C + k] + i * g;
      float t = tanh_approx(cn);
      c[m * C + k] = cn; tanh_c[m * C + k] = t; h[m * C + k] = o * t;
    }
  }
}

// The gate derivatives (M, 4C) from the gradients reaching h_k and c_k; dc becomes c_{k-1}'s.
HOT void gate_grad_rows(const float* __restrict__ gates, const float* __restrict__ c_prev,
                        const float* __restrict__ tanh_c, const float* __restrict__ dh_in, float* __restrict__ dc,
                        float* __restrict__ grad_pre, int64_t m0, int64_t m1, int64_t C) {
  for (int64_t m = m0; m < m1; ++m) {
    const float* a = gates + m * 4 * C;
    float* gp = grad_pre + m * 4 * C;
    for (int64_t k = 0; k < C; ++k) {
      int64_t e = m * C + k;
      float i = a[k], f = a[C + k], o = a[2 * C + k], g = a[3 * C + k], t = tanh_c[e];
      float dh = dh_in[e], dct = dc[e];
      gp[2 * C + k] = dh * t * (1.0f - o) * o;
      dct += dh * o * (1.0f - t * t);
      gp[k] = dct * g * (1.0f - i) * i;
      gp[C + k] = dct * c_prev[e] * (1.0f - f) * f;
      gp[3 * C + k] = dct * i * (1.0f - g * g);
      dc[e] = dct * f;
    }
  }
}

// One sample's write-factor gradients from gw, the write half of grad_x (rows 2C apart).
HOT void write_grads(const float* __restrict__ gw, const float* __restrict__ fz, const float* __restrict__ fy, const float* __restrict__ fxc, float* __restrict__ gfz, float* __restrict__ gfy,
                     float* __restrict__ gfxc, int64_t D, int64_t H, int64_t W, int64_t C) {
  std::vector<float> gzy(C);
  std::fill(gfz, gfz + D * C, 0.0f); std::fill(gfy, gfy + H * C, 0.0f); std::fill(gfxc, gfxc + W * C, 0.0f);
  for (int64_t d = 0; d < D; ++d)
    for (int64_t h = 0; h < H; ++h) {
      std::fill(gzy.begin(), gzy.end(), 0.0f);
      for (int64_t w = 0; w < W; ++w) {
        const float* g = gw + ((d * H + h) * W + w) * 2 * C;
        for (int64_t c = 0; c < C; ++c) {
          gfxc[w * C + c] += g[c] * fz[d * C + c] * fy[h * C + c];
          gzy[c] += g[c] * fxc[w * C + c];
        }
      }
      for (int64_t c = 0; c < C; ++c) {
        gfz[d * C + c] += gzy[c] * fy[h * C + c];
        gfy[h * C + c] += gzy[c] * fz[d * C + c];
      }
    }
}

using at::Tensor;
using Dtype = std::optional<at::ScalarType>;

struct Sizes {  // of a channels-last state (B, D, H, W, C); V voxels per sample, M rows in all
  int64_t B, D, H, W, C, V, M;
  explicit Sizes(const Tensor& h)
      : B(h.size(0)), D(h.size(1)), H(h.size(2)), W(h.size(3)), C(h.size(4)), V(D * H * W), M(B * V) {}
};

// The mix's product a @ b, its operands in the autocast type when there is one; float32 out.
static Tensor product(const Tensor& a, const Tensor& b, Dtype dtype) {
  return dtype ? at::mm(a.to(*dtype), b.to(*dtype)).to(at::kFloat) : at::mm(a, b);
}

// Chunk k's [dw_V(V) ; dw_h(h) ; 1] into x (M, 2C+1), from the factors and the previous state h (B, D, H, W, C).
static void build_input(const Tensor& fz, const Tensor& fy, const Tensor& fxc, int64_t k, const Tensor& h,
                        const Tensor& rows, const std::optional<Tensor>& offset, Tensor& x, const Sizes& s) {
  const int64_t C = s.C, step = 2 * C + 1;
  const float* r = rows.data_ptr<float>();  // (3 axes, 3 taps, C)
  at::parallel_for(0, s.B, 1, [&](int64_t b0, int64_t b1) {
    std::vector<float> t1(s.V * C), t2(s.V * C);  // after the D, then the H convolution
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t kb = k * s.B + b;
      float* xb = x.data_ptr<float>() + b * s.V * step;
      write_rows(fz.data_ptr<float>() + kb * s.D * C, fy.data_ptr<float>() + kb * s.H * C,
                 fxc.data_ptr<float>() + kb * s.W * C, xb, s.D, s.H, s.W, C);
      conv_rows(h.data_ptr<float>() + b * s.V * C, C, t1.data(), C, r, 1, s.D, s.H * s.W, C);
      conv_rows(t1.data(), C, t2.data(), C, r + 3 * C, s.D, s.H, s.W, C);
      conv_rows(t2.data(), C, xb + C, step, r + 6 * C, s.D * s.H, s.W, 1, C);
    }
  });
  if (offset)  // the same volume for every sample
    x.narrow(1, 0, 2 * C).view({s.B, s.V, 2 * C}).add_(offset->view({s.V, 2 * C}));
}

// The scan. Returns hs, cs (K, B, D, H, W, C) and, with keep, what the backward reads: each chunk's x
// (M, 2C+1), then each chunk's gates (M, 4C), then each chunk's tanh(c) (M, C). They are allocated a chunk at a
// time: blocks of a few MB come back from malloc's free lists each step, where one block of K chunks would be
// fresh pages from the kernel every step (zeroed on first touch, which costs more than the pass itself).
std::vector<Tensor> scan_forward(Tensor fz, Tensor fy, Tensor fxc, Tensor h0, Tensor c0, Tensor taps, Tensor weight,
                                 std::optional<Tensor> offset, Dtype dtype, bool keep) {
  fz = fz.contiguous(); fy = fy.contiguous(); fxc = fxc.contiguous();
  const Tensor rows = taps.transpose(1, 2).contiguous();  // (3 axes, C, 3 taps) → (3 axes, 3 taps, C)
  h0 = h0.contiguous(); c0 = c0.contiguous();
  if (offset) offset = offset->contiguous();
  const Sizes s(h0);
  const int64_t K = fz.size(0), C = s.C;
  Tensor hs = at::empty({K, s.B, s.D, s.H, s.W, C}, h0.options()), cs = at::empty_like(hs);
  std::vector<Tensor> xs, gates, tanh_cs;  // one per chunk with keep, else one for all
  const Tensor weight_t = weight.t();  // (2C+1, 4C)
  for (int64_t k = 0; k < K; ++k) {
    if (keep || k == 0) {
      xs.push_back(at::empty({s.M, 2 * C + 1}, h0.options()));
      gates.push_back(at::empty({s.M, 4 * C}, h0.options()));
      tanh_cs.push_back(at::empty({s.M, C}, h0.options()));
    }
    const Tensor h = k ? hs[k - 1] : h0, c = k ? cs[k - 1] : c0;
    Tensor &x = xs.back(), &g = gates.back();
    build_input(fz, fy, fxc, k, h, rows, offset, x, s);
    if (dtype) g.copy_(product(x, weight_t, dtype)); else at::mm_out(g, x, weight_t);
    float *gp = g.data_ptr<float>(), *cp = c.data_ptr<float>(), *tp = tanh_cs.back().data_ptr<float>();
    float *ck = cs[k].data_ptr<float>(), *hk = hs[k].data_ptr<float>();
    at::parallel_for(0, s.M, 64, [&](int64_t m0, int64_t m1) { gate_rows(gp, cp, ck, tp, hk, m0, m1, C); });
  }
  std::vector<Tensor> out = {hs, cs};
  if (keep) for (auto* kept : {&xs, &gates, &tanh_cs}) out.insert(out.end(), kept->begin(), kept->end());
  return out;
}

// One sample's share of a chunk's backward from its grad_x rows gx (M, 2C): the write factors' gradients and,
// through the depthwise convolutions' adjoints (W, H, then D), dh, the gradient reaching h_{k-1}; the taps'
// gradients go into acc (3 axes, 3 taps, C). hp: the sample's h_{k-1}; scratch: four volumes of V·C floats.
static void sample_backward(const float* gx, const float* hp, const float* fz, const float* fy, const float* fxc,
                            float* gfz, float* gfy, float* gfxc, const float* r, const float* flipped, double* acc,
                            float* dh, const Sizes& s, float* scratch) {
  const int64_t C = s.C;
  float *t1 = scratch, *t2 = t1 + s.V * C, *u1 = t2 + s.V * C, *u2 = u1 + s.V * C;
  write_grads(gx, fz, fy, fxc, gfz, gfy, gfxc, s.D, s.H, s.W, C);
  conv_rows(hp, C, t1, C, r, 1, s.D, s.H * s.W, C);  // the W and H convolutions' inputs, recomputed
  conv_rows(t1, C, t2, C, r + 3 * C, s.D, s.H, s.W, C);
  tap_grads(gx + C, t2, acc + 6 * C, s.D * s.H, s.W, 1, C, 2 * C);
  conv_rows(gx + C, 2 * C, u1, C, flipped + 6 * C, s.D * s.H, s.W, 1, C);
  tap_grads(u1, t1, acc + 3 * C, s.D, s.H, s.W, C, C);
  conv_rows(u1, C, u2, C, flipped + 3 * C, s.D, s.H, s.W, C);
  tap_grads(u2, hp, acc, 1, s.D, s.H * s.W, C, C);
  conv_rows(u2, C, dh, C, flipped, 1, s.D, s.H * s.W, C);
}

// The backward of scan_forward (keep: its 3K kept tensors) for the gradients of hs and cs (either may be absent).
// Returns the gradients of fz, fy, fxc, h0, c0, the taps (3, C, 3), mix, bias and, with has_offset, the offset (D, H, W, 2C).
std::vector<Tensor> scan_backward(Tensor fz, Tensor fy, Tensor fxc, Tensor h0, Tensor c0, Tensor taps, Tensor mix,
                                  Tensor hs, Tensor cs, std::vector<Tensor> kept,
                                  std::optional<Tensor> grad_hs, std::optional<Tensor> grad_cs, bool has_offset,
                                  Dtype dtype) {
  fz = fz.contiguous(); fy = fy.contiguous(); fxc = fxc.contiguous();
  h0 = h0.contiguous(); c0 = c0.contiguous();
  const Tensor rows = taps.transpose(1, 2).contiguous();  // (3 axes, 3 taps, C)
  const Sizes s(h0);
  const int64_t K = fz.size(0), C = s.C;
  Tensor grad_fz = at::empty_like(fz), grad_fy = at::empty_like(fy), grad_fxc = at::empty_like(fxc);
  Tensor grad_weight = at::zeros({4 * C, 2 * C + 1}, mix.options());  // for [mix | bias]
  Tensor grad_pre = at::empty({s.M, 4 * C}, h0.options()), grad_x = at::empty({s.M, 2 * C}, h0.options());
  Tensor dh = at::zeros({s.M, C}, h0.options()), dc = at::zeros({s.M, C}, h0.options());
  Tensor flipped = rows.flip(1).contiguous();  // the adjoints' taps
  Tensor acc = at::zeros({s.B, 3, 3, C}, h0.options().dtype(at::kDouble));  // the taps' gradients, per sample
  Tensor grad_offset = has_offset ? at::zeros({s.D, s.H, s.W, 2 * C}, h0.options()) : Tensor();
  for (int64_t k = K - 1; k >= 0; --k) {
    const Tensor h = k ? hs[k - 1] : h0, c = k ? cs[k - 1] : c0;
    const Tensor& x = kept[k];  // then gates and tanh(c), K apart
    const float *a = kept[K + k].data_ptr<float>(), *cp = c.data_ptr<float>(), *t = kept[2 * K + k].data_ptr<float>();
    if (grad_hs) dh.add_((*grad_hs)[k].reshape({s.M, C}));  // the outputs' own gradients
    if (grad_cs) dc.add_((*grad_cs)[k].reshape({s.M, C}));
    float *dhp = dh.data_ptr<float>(), *dcp = dc.data_ptr<float>(), *gp = grad_pre.data_ptr<float>();
    at::parallel_for(0, s.M, 64, [&](int64_t m0, int64_t m1) {
      gate_grad_rows(a, cp, t, dhp, dcp, gp, m0, m1, C);
    });
    if (dtype) grad_weight.add_(product(grad_pre.t(), x, dtype)); else grad_weight.addmm_(grad_pre.t(), x);
    if (dtype) grad_x.copy_(product(grad_pre, mix, dtype)); else at::mm_out(grad_x, grad_pre, mix);
    if (has_offset) grad_offset.view({s.V, 2 * C}).add_(grad_x.view({s.B, s.V, 2 * C}).sum(0));
    at::parallel_for(0, s.B, 1, [&](int64_t b0, int64_t b1) {
      std::vector<float> scratch(4 * s.V * C);
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t kb = k * s.B + b;
        sample_backward(grad_x.data_ptr<float>() + b * s.V * 2 * C, h.data_ptr<float>() + b * s.V * C,
                        fz.data_ptr<float>() + kb * s.D * C, fy.data_ptr<float>() + kb * s.H * C,
                        fxc.data_ptr<float>() + kb * s.W * C, grad_fz.data_ptr<float>() + kb * s.D * C,
                        grad_fy.data_ptr<float>() + kb * s.H * C, grad_fxc.data_ptr<float>() + kb * s.W * C,
                        rows.data_ptr<float>(), flipped.data_ptr<float>(), acc.data_ptr<double>() + b * 9 * C,
                        dhp + b * s.V * C, s, scratch.data());
      }
    });
  }
  Tensor grad_taps = acc.sum(0).to(at::kFloat).transpose(1, 2).contiguous();  // (3 axes, C, 3 taps)
  auto vol = h0.sizes();
  return {grad_fz, grad_fy, grad_fxc, dh.view(vol), dc.view(vol), grad_taps,
          grad_weight.narrow(1, 0, 2 * C), grad_weight.select(1, 2 * C), grad_offset};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("scan_forward", &scan_forward, "the fused ConvLSTM scan (update.convlstm_scan), float32 on the CPU");
  m.def("scan_backward", &scan_backward, "its backward");
}
