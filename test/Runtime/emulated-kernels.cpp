//===- emulated-kernels.cpp - CUDA kernels on the CPU emulator ------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// Runs the CUDA backend's kernels that are written against Portable.cuh on
// cuda-emulator.h and compares them with the CPU backend on the same
// inputs (the CPU backend is in turn checked against PyTorch,
// kernels.test):
//
// - flash attention (FlashAttention.cuh), forward and backward through the
//   orchestration the runtime uses: out, lse, dq, dk and dv against
//   fsdp_rt_attention(_grad), within 1e-2 of each tensor's largest
//   magnitude for bf16 and 4e-3 for f16, context parallelism's calls
//   (query and key positions, keys of another length, queries that see no
//   key, a statistics gradient) included;
// - attention_combine and its gradient (AttentionCombine.cuh): within 1e-5
//   (f32) or 1e-2 (bf16), statistics within 1e-6, -inf ones included;
// - the cross-entropy row kernels (LossRows.cuh): per-row losses within
//   1e-5, logit gradients within 1e-5 (f32) or 1e-2 (bf16/f16), on rows
//   that are 16-byte aligned and rows that are not;
// - the rms_norm row kernels (NormRows.cuh): out and dx within 1e-5 (f32)
//   or 1e-2 (bf16/f16), each row's 1 / rms within 1e-12 of float64;
// - multi-tensor AdamW (AdamWMulti.cuh): three steps on tables of tensors
//   of many sizes (empty, one element, chunk boundaries), some updated in
//   place and some into new buffers, more tensors than one launch takes, a
//   grid smaller than the chunks, f32 and bf16 gradients: parameters and
//   moments within 1e-6 of the CPU backend's fsdp_rt_adamw, called one
//   tensor at a time.
//
// One line per case and tensor; exits 1 if any error exceeds its bound.
//
//===----------------------------------------------------------------------===//

#define FSDP_CUDA_EMULATE
#include "cuda-emulator.h"

#include "../../lib/Runtime/CUDA/AdamWMulti.cuh"
#include "../../lib/Runtime/CUDA/AttentionCombine.cuh"
#include "../../lib/Runtime/CUDA/FlashAttention.cuh"
#include "../../lib/Runtime/CUDA/LossRows.cuh"
#include "../../lib/Runtime/CUDA/MoEKernels.cuh"
#include "../../lib/Runtime/CUDA/NormRows.cuh"
#include "../../lib/Runtime/CUDA/RowExchange.cuh"
#include "fsdp/Runtime/Runtime.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

namespace adamw = fsdp::rt::cuda::adamw;
namespace combine = fsdp::rt::cuda::combine;
namespace flash = fsdp::rt::cuda::flash;
namespace loss = fsdp::rt::cuda::loss;
namespace moe = fsdp::rt::cuda::moe;
namespace norm = fsdp::rt::cuda::norm;
namespace portable = fsdp::rt::cuda::portable;
namespace rows = fsdp::rt::cuda::rows;

namespace {

/// The orchestration's launcher, on the emulator.
struct Launcher {
  std::vector<std::vector<float>> temps;

  template <typename Kernel, typename... Args>
  void launch(Kernel kernel, unsigned gx, unsigned gy, unsigned gz, int threads,
              size_t shared, Args... args) {
    // Every kernel is __launch_bounds__(kThreads) on the GPU, which refuses
    // a larger block (the H200 did, with cudaErrorInvalidValue, when dQ's
    // cast launched 256 threads).
    if (threads > flash::kThreads) {
      std::fprintf(stderr, "launch of %d threads: the kernels allow %d\n",
                   threads, flash::kThreads);
      std::exit(1);
    }
    emu::launch(gx, gy, gz, threads, shared, [&] { kernel(args...); });
  }
  float *temp(int64_t n) {
    // NaN until written, as fresh device memory might as well be.
    temps.emplace_back(size_t(n), NAN);
    return temps.back().data();
  }
  void zero(float *p, int64_t n) { std::fill(p, p + n, 0.0f); }
};

struct Case {
  const char *name;
  bool half;
  int64_t b, s, nq, nkv, d;
  int causal;
  int64_t window;
  double scale;
  /// Context parallelism at cp 2, the rank holding chunks 0 and 3 of a
  /// sequence of 2·s: 1, its queries over the whole sequence's keys
  /// (all_gather); 2, over the keys of chunks 1 and 2 (a ring step, some
  /// queries seeing none). With `dlse`, the backward takes a gradient of
  /// the statistics too.
  int placed = 0;
  bool dlse = false;
  /// Packed rows: documents of 23, 1, 71, 9, 130 and 40 tokens over and
  /// over (the queries' positions in their documents; by the tokens' places
  /// in the whole sequence with context parallelism).
  bool packed = false;
};

/// A token's position in its document, at index `at` of a packed row.
int64_t documentPosition(int64_t at) {
  static const int64_t lengths[] = {23, 1, 71, 9, 130, 40};
  int64_t start = 0;
  for (int k = 0;; k = (k + 1) % 6) {
    if (at < start + lengths[k])
      return at - start;
    start += lengths[k];
  }
}

using Bits = std::vector<uint16_t>;

uint16_t toBits(float x, bool half) {
  uint16_t bits;
  if (half) {
    __half h = __float2half_rn(x);
    memcpy(&bits, &h, 2);
  } else {
    __nv_bfloat16 h = __float2bfloat16_rn(x);
    memcpy(&bits, &h, 2);
  }
  return bits;
}
float fromBits(uint16_t bits, bool half) {
  uint32_t w = bits;
  return emu::element(w, 0, half);
}

Bits random(std::mt19937 &rng, size_t n, float range, bool half) {
  std::uniform_real_distribution<float> dist(-range, range);
  Bits out(n);
  for (uint16_t &x : out)
    x = toBits(dist(rng), half);
  return out;
}

/// max |got - want| / max |want|.
double relError(const std::vector<float> &got, const std::vector<float> &want) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err = std::max(err, double(std::fabs(got[i] - want[i])));
    scale = std::max(scale, double(std::fabs(want[i])));
    if (std::isnan(got[i]))
      return INFINITY;
  }
  return scale > 0 ? err / scale : err;
}
std::vector<float> widen(const Bits &x, bool half) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    out[i] = fromBits(x[i], half);
  return out;
}

/// The relative error of the statistics, where every -inf (a query that
/// sees no key) must be -inf in both.
double lseError(const std::vector<float> &got, const std::vector<float> &want) {
  std::vector<float> a, b;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isinf(want[i]) || std::isinf(got[i])) {
      if (got[i] != want[i])
        return INFINITY;
      continue;
    }
    a.push_back(got[i]);
    b.push_back(want[i]);
  }
  return relError(a, b);
}

template <typename E, int D> bool run(const Case &c) {
  using T = typename E::T;
  std::mt19937 rng(1234);
  // The rank's query positions (chunks 0 and 3 of 4 chunks of s / 2) and
  // the keys', per batch entry.
  int64_t chunk = c.s / 2, skv = c.placed == 1 ? 2 * c.s : c.s;
  std::vector<int64_t> qpos, kpos;
  for (int64_t bi = 0; bi < c.b && c.placed; ++bi) {
    for (int64_t i = 0; i < c.s; ++i)
      qpos.push_back(i < chunk ? i : 3 * chunk + (i - chunk));
    for (int64_t j = 0; j < c.s && c.placed == 2; ++j)
      kpos.push_back(chunk + j);
  }
  std::vector<int64_t> dpos;
  for (int64_t bi = 0; bi < c.b && c.packed; ++bi)
    for (int64_t i = 0; i < c.s; ++i)
      dpos.push_back(documentPosition(c.placed ? qpos[size_t(i)] : i));
  const int64_t *qp = qpos.empty() ? nullptr : qpos.data(),
                *kp = kpos.empty() ? nullptr : kpos.data(),
                *dp = dpos.empty() ? nullptr : dpos.data();
  size_t nqElems = size_t(c.b * c.s * c.nq * D),
         nkvElems = size_t(c.b * skv * c.nkv * D),
         nStat = size_t(c.b * c.nq * c.s);
  Bits q = random(rng, nqElems, 2.0f, c.half),
       k = random(rng, nkvElems, 2.0f, c.half),
       v = random(rng, nkvElems, 1.0f, c.half),
       dout = random(rng, nqElems, 1.0f, c.half);
  std::vector<float> dlse;
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (size_t i = 0; i < nStat && c.dlse; ++i)
    dlse.push_back(dist(rng));
  const float *dl = dlse.empty() ? nullptr : dlse.data();
  fsdp_rt_dtype dt = c.half ? FSDP_RT_F16 : FSDP_RT_BF16;

  // The CPU backend: the specification.
  Bits out(nqElems), dq(nqElems), dk(nkvElems), dv(nkvElems);
  std::vector<float> lse(nStat);
  fsdp_rt_attention(nullptr, dt, q.data(), k.data(), v.data(), c.b, c.s, skv,
                    c.nq, c.nkv, D, D, qp, kp, dp, c.causal, c.window, c.scale,
                    out.data(), lse.data());
  fsdp_rt_attention_grad(nullptr, dt, q.data(), k.data(), v.data(), out.data(),
                         lse.data(), dout.data(), dl, c.b, c.s, skv, c.nq,
                         c.nkv, D, D, qp, kp, dp, c.causal, c.window, c.scale,
                         dq.data(), dk.data(), dv.data());

  // The flash kernels on the emulator.
  Bits fout(nqElems, 0xffff), fdq(nqElems, 0xffff), fdk(nkvElems, 0xffff),
      fdv(nkvElems, 0xffff);
  std::vector<float> flse(nStat, NAN);
  auto as = [](const Bits &x) { return reinterpret_cast<const T *>(x.data()); };
  auto asOut = [](Bits &x) { return reinterpret_cast<T *>(x.data()); };
  flash::Params p = flash::makeParams(c.b, c.s, skv, c.nq, c.nkv, qp, kp, dp,
                                      c.causal, c.window, c.scale);
  {
    Launcher launcher;
    flash::forward<E, D>(launcher,
                         flash::ForwardArgs<E>{as(q), as(k), as(v), p,
                                               asOut(fout), flse.data()});
  }
  {
    Launcher launcher;
    flash::backward<E, D>(
        launcher,
        flash::BackwardArgs<E>{as(q), as(k), as(v), as(dout), lse.data(),
                               nullptr, p, nullptr, asOut(fdk), asOut(fdv)},
        as(out), dl, asOut(fdq));
  }

  double bound = c.half ? 4e-3 : 1e-2;
  struct Row {
    const char *tensor;
    double err;
  } rows[] = {
      {"out", relError(widen(fout, c.half), widen(out, c.half))},
      {"lse", lseError(flse, lse)},
      {"dq", relError(widen(fdq, c.half), widen(dq, c.half))},
      {"dk", relError(widen(fdk, c.half), widen(dk, c.half))},
      {"dv", relError(widen(fdv, c.half), widen(dv, c.half))},
  };
  bool ok = true;
  for (const Row &r : rows) {
    bool pass = r.err <= bound;
    ok = ok && pass;
    std::printf("%s %s: %.3e (bound %.0e) %s\n", c.name, r.tensor, r.err, bound,
                pass ? "PASS" : "FAIL");
  }
  return ok;
}

template <int D> bool dispatch(const Case &c) {
  return c.half ? run<flash::F16, D>(c) : run<flash::BF16, D>(c);
}

bool report(const char *name, const char *tensor, double err, double bound) {
  bool pass = err <= bound;
  std::printf("%s %s: %.3e (bound %.0e) %s\n", name, tensor, err, bound,
              pass ? "PASS" : "FAIL");
  return pass;
}

/// Seeded uniform values in [-bound, bound], rounded to element type E.
template <typename E> struct RandomElements {
  std::mt19937 rng;
  std::uniform_real_distribution<float> dist;
  RandomElements(unsigned seed, float bound) : rng(seed), dist(-bound, bound) {}
  float scalar() { return dist(rng); }
  std::vector<typename E::T> operator()(size_t count) {
    std::vector<typename E::T> v(count);
    for (auto &x : v)
      x = portable::fromFloat<E>(dist(rng));
    return v;
  }
};

struct LossCase {
  const char *name;
  fsdp_rt_dtype dtype;
  int64_t rows, vocab;
  fsdp_rt_reduction reduction;
};

/// Emulated loss and gradient rows against the CPU backend's.
template <typename E> bool runLoss(const LossCase &c) {
  using T = typename E::T;
  std::mt19937 rng(99);
  std::uniform_real_distribution<float> dist(-8.0f, 8.0f);
  size_t n = size_t(c.rows * c.vocab);
  std::vector<T> logits(n);
  for (T &x : logits)
    x = portable::fromFloat<E>(dist(rng));
  std::vector<int64_t> labels(size_t(c.rows));
  for (int64_t r = 0; r < c.rows; ++r)
    labels[r] =
        r == 1 ? -100 : (r == 0 ? c.vocab - 1 : int64_t(rng() % c.vocab));
  std::vector<float> dloss(size_t(c.rows));
  for (float &g : dloss)
    g = dist(rng) / 8.0f;
  int64_t count = c.rows - 1;

  std::vector<float> lossCpu(size_t(c.rows));
  fsdp_rt_cross_entropy(nullptr, c.dtype, logits.data(), FSDP_RT_I64,
                        labels.data(), c.rows, c.vocab, -100,
                        FSDP_RT_REDUCTION_NONE, lossCpu.data(), nullptr);
  std::vector<T> gradCpu(n), gradEmu(n);
  fsdp_rt_cross_entropy_grad(nullptr, c.dtype, logits.data(), FSDP_RT_I64,
                             labels.data(), c.rows, c.vocab, -100, c.reduction,
                             dloss.data(), gradCpu.data());

  std::vector<double> losses(size_t(c.rows), NAN);
  std::vector<float> lossEmu(size_t(c.rows), NAN);
  emu::launch(unsigned(c.rows), 1, 1, loss::kRowThreads, 0, [&] {
    loss::crossEntropyRows<E>(logits.data(), FSDP_RT_I64, labels.data(), c.rows,
                              c.vocab, -100, losses.data(), lossEmu.data());
  });
  // Two rows per block here, to cover the grid-stride loop.
  emu::launch(unsigned((c.rows + 1) / 2), 1, 1, loss::kRowThreads, 0, [&] {
    loss::crossEntropyGradRows<E>(logits.data(), FSDP_RT_I64, labels.data(),
                                  c.rows, c.vocab, -100, c.reduction,
                                  dloss.data(), &count, gradEmu.data());
  });
  auto widen = [](const std::vector<T> &x) {
    std::vector<float> out(x.size());
    for (size_t i = 0; i < x.size(); ++i)
      out[i] = portable::toFloat<E>(x[i]);
    return out;
  };
  // The double losses (what SUM and MEAN total) and their f32 copies.
  std::vector<float> narrowed(losses.begin(), losses.end());
  bool ok = report(c.name, "loss", relError(narrowed, lossCpu), 1e-5);
  ok = report(c.name, "loss_none", relError(lossEmu, lossCpu), 1e-5) && ok;
  return report(c.name, "dlogits", relError(widen(gradEmu), widen(gradCpu)),
                E::kFloat ? 1e-5 : 1e-2) &&
         ok;
}

struct NormCase {
  const char *name;
  fsdp_rt_dtype dtype;
  int64_t rows, h;
};

/// `v` of element type E as floats.
template <typename E>
std::vector<float> widenAs(const std::vector<typename E::T> &v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    out[i] = portable::toFloat<E>(v[i]);
  return out;
}

/// Emulated rms_norm rows against the CPU backend's.
template <typename E> bool runNorm(const NormCase &c) {
  using T = typename E::T;
  RandomElements<E> fill(7, 2.0f);
  size_t n = size_t(c.rows * c.h);
  std::vector<T> x = fill(n), w = fill(size_t(c.h)), dy = fill(n);
  const double eps = 1e-5;
  std::vector<T> outCpu(n), outEmu(n), dxCpu(n), dxEmu(n), dw(size_t(c.h));
  fsdp_rt_rms_norm(nullptr, c.dtype, x.data(), w.data(), c.rows, c.h, eps,
                   outCpu.data());
  fsdp_rt_rms_norm_grad(nullptr, c.dtype, x.data(), w.data(), dy.data(), c.rows,
                        c.h, eps, dxCpu.data(), dw.data());
  std::vector<double> inv(size_t(c.rows), NAN);
  unsigned grid = norm::normGrid(c.rows);
  emu::launch(grid, 1, 1, norm::kNormThreads, 0, [&] {
    norm::rmsNormRows<E>(x.data(), w.data(), c.rows, c.h, eps, outEmu.data());
  });
  emu::launch(grid, 1, 1, norm::kNormThreads, 0, [&] {
    norm::rmsNormGradRows<E>(x.data(), w.data(), dy.data(), c.rows, c.h, eps,
                             dxEmu.data(), inv.data());
  });
  double invErr = 0;
  for (int64_t r = 0; r < c.rows; ++r) {
    double sumSq = 0;
    for (int64_t i = 0; i < c.h; ++i) {
      double v = portable::toFloat<E>(x[size_t(r * c.h + i)]);
      sumSq += v * v;
    }
    double want = 1.0 / std::sqrt(sumSq / double(c.h) + eps);
    invErr = std::max(invErr, std::fabs(inv[size_t(r)] - want) / want);
  }
  double bound = E::kFloat ? 1e-5 : 1e-2;
  bool ok = report(c.name, "out",
                   relError(widenAs<E>(outEmu), widenAs<E>(outCpu)), bound);
  ok = report(c.name, "dx", relError(widenAs<E>(dxEmu), widenAs<E>(dxCpu)),
              bound) &&
       ok;
  return report(c.name, "inv_rms", invErr, 1e-12) && ok;
}

/// Emulated attention_combine and its gradient against the CPU backend's,
/// on [2, 33, 3, 16] partial attentions with statistics that are -inf
/// (a partial attention that saw no key) in one of them, the other, or
/// both, now and then.
template <typename E> bool runCombine(const char *name, fsdp_rt_dtype dtype) {
  using T = typename E::T;
  const int64_t b = 2, s = 33, nq = 3, dv = 16, rows = b * s * nq;
  RandomElements<E> fill(11, 2.0f);
  const size_t n = size_t(rows * dv), nr = size_t(rows);
  std::vector<T> a = fill(n), bb = fill(n), dout = fill(n);
  std::vector<float> la(nr), lb(nr), dlse(nr);
  for (int64_t r = 0; r < rows; ++r) {
    la[size_t(r)] = r % 7 == 0 ? -INFINITY : fill.scalar();
    lb[size_t(r)] = r % 5 == 0 ? -INFINITY : fill.scalar();
    dlse[size_t(r)] = fill.scalar();
  }
  std::vector<T> outCpu(n), outEmu(n), daCpu(n), daEmu(n), dbCpu(n), dbEmu(n);
  std::vector<float> lseCpu(nr), lseEmu(nr), dlaCpu(nr), dlaEmu(nr), dlbCpu(nr),
      dlbEmu(nr);
  fsdp_rt_attention_combine(nullptr, dtype, a.data(), la.data(), bb.data(),
                            lb.data(), b, s, nq, dv, outCpu.data(),
                            lseCpu.data());
  fsdp_rt_attention_combine_grad(
      nullptr, dtype, a.data(), la.data(), bb.data(), lb.data(), outCpu.data(),
      lseCpu.data(), dout.data(), dlse.data(), b, s, nq, dv, daCpu.data(),
      dlaCpu.data(), dbCpu.data(), dlbCpu.data());
  unsigned grid = combine::blocksFor(rows);
  emu::launch(grid, 1, 1, combine::kThreads, 0, [&] {
    combine::forwardKernel<E>(a.data(), la.data(), bb.data(), lb.data(), rows,
                              s, nq, dv, outEmu.data(), lseEmu.data());
  });
  emu::launch(grid, 1, 1, combine::kThreads, 0, [&] {
    combine::backwardKernel<E>(a.data(), la.data(), bb.data(), lb.data(),
                               outCpu.data(), lseCpu.data(), dout.data(),
                               dlse.data(), rows, s, nq, dv, daEmu.data(),
                               dlaEmu.data(), dbEmu.data(), dlbEmu.data());
  });
  double bound = E::kFloat ? 1e-5 : 1e-2;
  bool ok = report(name, "out",
                   relError(widenAs<E>(outEmu), widenAs<E>(outCpu)), bound);
  ok = report(name, "lse", lseError(lseEmu, lseCpu), 1e-6) && ok;
  ok = report(name, "dout_a", relError(widenAs<E>(daEmu), widenAs<E>(daCpu)),
              bound) &&
       ok;
  ok = report(name, "dout_b", relError(widenAs<E>(dbEmu), widenAs<E>(dbCpu)),
              bound) &&
       ok;
  ok = report(name, "dlse_a", relError(dlaEmu, dlaCpu), 1e-5) && ok;
  return report(name, "dlse_b", relError(dlbEmu, dlbCpu), 1e-5) && ok;
}

/// Three emulated multi-tensor AdamW steps against the CPU backend's
/// fsdp_rt_adamw one tensor at a time. Tensor k updates in place when k is
/// even; `grid` (0: the runtime's) may be smaller than the chunks, so blocks
/// stride.
template <typename E>
bool runAdamW(const char *name, fsdp_rt_dtype gradType,
              const std::vector<int64_t> &sizes, unsigned grid) {
  using T = typename E::T;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  struct State {
    std::vector<float> p, m, v, newP, newM, newV;
    std::vector<T> g;
  };
  size_t count = sizes.size();
  std::vector<State> emu(count), cpu(count);
  for (size_t k = 0; k < count; ++k) {
    size_t n = size_t(sizes[k]);
    State &s = emu[k];
    s.p.resize(n);
    for (float &x : s.p)
      x = dist(rng);
    s.m.assign(n, 0.0f);
    s.v.assign(n, 0.0f);
    s.newP.resize(n);
    s.newM.resize(n);
    s.newV.resize(n);
    s.g.resize(n);
    cpu[k] = s;
  }
  const double lr = 0.01, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, wd = 0.1;
  // The gradient's scale and a schedule's factor of the learning rate.
  float scale = 0.5f, lrScale = 0.75f;
  for (int step = 1; step <= 3; ++step) {
    float count1 = float(step);
    for (size_t k = 0; k < count; ++k)
      for (size_t i = 0; i < emu[k].g.size(); ++i)
        cpu[k].g[i] = emu[k].g[i] = portable::fromFloat<E>(dist(rng));
    // In place (even k) or into the new buffers, which the next step
    // reads as its state.
    auto table = [&](std::vector<State> &states) {
      std::vector<fsdp_rt_adamw_tensor> ts;
      for (size_t k = 0; k < count; ++k) {
        State &s = states[k];
        bool inPlace = k % 2 == 0;
        ts.push_back({s.p.data(), s.m.data(), s.v.data(),
                      inPlace ? s.p.data() : s.newP.data(),
                      inPlace ? s.m.data() : s.newM.data(),
                      inPlace ? s.v.data() : s.newV.data(), s.g.data(),
                      sizes[k]});
      }
      return ts;
    };
    std::vector<fsdp_rt_adamw_tensor> cpuTable = table(cpu);
    for (const fsdp_rt_adamw_tensor &t : cpuTable)
      fsdp_rt_adamw(nullptr, 1, &t, gradType, lr, beta1, beta2, eps, wd,
                    &count1, &scale, &lrScale);
    std::vector<fsdp_rt_adamw_tensor> emuTable = table(emu);
    adamw::Hyper hyper = {lr, beta1, beta2, eps, wd};
    for (size_t first = 0; first < count; first += adamw::kTable) {
      adamw::Table launchTable;
      int64_t chunks =
          adamw::fillTable(launchTable, emuTable.data() + first,
                           int(std::min<size_t>(count - first, adamw::kTable)));
      emu::launch(grid ? grid : adamw::adamwGrid(chunks), 1, 1,
                  adamw::kAdamWThreads, 0, [&] {
                    adamw::adamwMulti<E>(launchTable, hyper, &count1, &scale,
                                         &lrScale);
                  });
    }
    for (std::vector<State> *states : {&emu, &cpu})
      for (size_t k = 1; k < count; k += 2) {
        State &s = (*states)[k];
        std::swap(s.p, s.newP);
        std::swap(s.m, s.newM);
        std::swap(s.v, s.newV);
      }
  }
  double worstP = 0, worstM = 0, worstV = 0;
  for (size_t k = 0; k < count; ++k) {
    if (emu[k].p.empty())
      continue;
    worstP = std::max(worstP, relError(emu[k].p, cpu[k].p));
    worstM = std::max(worstM, relError(emu[k].m, cpu[k].m));
    worstV = std::max(worstV, relError(emu[k].v, cpu[k].v));
  }
  bool ok = report(name, "param", worstP, 1e-6);
  ok = report(name, "exp_avg", worstM, 1e-6) && ok;
  return report(name, "exp_avg_sq", worstV, 1e-6) && ok;
}

} // namespace

/// The mixture-of-experts kernels (MoEKernels.cuh) against the CPU
/// backend's calls: routing and its gradient, the expert order and back
/// (weighted, and its gradients), the grouped products and their gradients
/// on a dispatch buffer of more rows than arrive, with segments of two
/// sources and empty ones, and the load-balancing statistics.
/// Threads of the emulated grid-stride launches: each emulated thread is a
/// host thread, and the kernels stride over what two small blocks miss.
constexpr int kMoEThreads = 64;

template <typename E>
bool runMoE(const char *name, fsdp_rt_dtype dtype, bool normalize) {
  using T = typename E::T;
  const int64_t tokens = 37, experts = 6, k = 2, hidden = 20, n = 24;
  const int64_t slots = tokens * k, segments = 2 * experts, rows = slots + 19;
  RandomElements<E> fill(7, 2.0f);
  auto asFloat = [](const std::vector<int64_t> &x) {
    return std::vector<float>(x.begin(), x.end());
  };
  const double tol = E::kFloat ? 1e-5 : 1e-2;
  std::vector<T> logits = fill(static_cast<size_t>(tokens * experts));
  // Ties: token 0's experts 1, 2 and 4 share the largest logit.
  logits[1] = logits[2] = logits[4] = portable::fromFloat<E>(3.0f);
  std::vector<T> x = fill(static_cast<size_t>(tokens * hidden));

  // Routing.
  std::vector<T> wCpu(static_cast<size_t>(slots)),
      wEmu(static_cast<size_t>(slots));
  std::vector<int64_t> iCpu(static_cast<size_t>(slots)),
      iEmu(static_cast<size_t>(slots), -7);
  fsdp_rt_moe_router(nullptr, dtype, logits.data(), tokens, experts, k,
                     normalize, wCpu.data(), iCpu.data());
  emu::launch(2, 1, 1, kMoEThreads, 0, [&] {
    moe::router<E>(logits.data(), tokens, experts, k, normalize, wEmu.data(),
                   iEmu.data());
  });
  bool ok =
      report(name, "router_indices", relError(asFloat(iEmu), asFloat(iCpu)), 0);
  ok = report(name, "router_weights",
              relError(widenAs<E>(wEmu), widenAs<E>(wCpu)), tol) &&
       ok;
  std::vector<T> dw = fill(static_cast<size_t>(slots));
  std::vector<T> dlCpu(logits.size()), dlEmu(logits.size());
  fsdp_rt_moe_router_grad(nullptr, dtype, logits.data(), iCpu.data(), dw.data(),
                          tokens, experts, k, normalize, dlCpu.data());
  emu::launch(2, 1, 1, kMoEThreads, 0, [&] {
    moe::routerGrad<E>(logits.data(), iCpu.data(), dw.data(), tokens, experts,
                       k, normalize, dlEmu.data());
  });
  ok = report(name, "router_grad",
              relError(widenAs<E>(dlEmu), widenAs<E>(dlCpu)), tol) &&
       ok;

  // Expert order and back.
  std::vector<T> rowsCpu(static_cast<size_t>(slots * hidden)),
      rowsEmu(rowsCpu.size());
  std::vector<int64_t> cCpu(static_cast<size_t>(experts)),
      cEmu(static_cast<size_t>(experts)), start(static_cast<size_t>(experts)),
      row(static_cast<size_t>(slots));
  fsdp_rt_moe_permute(nullptr, dtype, x.data(), iCpu.data(), tokens, hidden, k,
                      experts, rowsCpu.data(), cCpu.data());
  emu::launch(1, 1, 1, kMoEThreads, 0, [&] {
    moe::slotRows(iCpu.data(), slots, experts, cEmu.data(), start.data(),
                  row.data());
  });
  emu::launch(2, 1, 1, kMoEThreads, 0, [&] {
    moe::permute<E>(x.data(), row.data(), slots, hidden, k, rowsEmu.data());
  });
  ok = report(name, "permute_counts", relError(asFloat(cEmu), asFloat(cCpu)),
              0) &&
       ok;
  ok = report(name, "permute_rows",
              relError(widenAs<E>(rowsEmu), widenAs<E>(rowsCpu)), 0) &&
       ok;
  std::vector<T> yCpu(x.size()), yEmu(x.size());
  fsdp_rt_moe_unpermute(nullptr, dtype, rowsCpu.data(), iCpu.data(),
                        wCpu.data(), tokens, hidden, k, experts, yCpu.data());
  emu::launch(2, 1, 1, kMoEThreads, 0, [&] {
    moe::unpermute<E>(rowsCpu.data(), row.data(), wCpu.data(), tokens, hidden,
                      k, yEmu.data());
  });
  ok = report(name, "unpermute", relError(widenAs<E>(yEmu), widenAs<E>(yCpu)),
              tol) &&
       ok;
  std::vector<T> dy = fill(x.size());
  std::vector<T> drCpu(rowsCpu.size()), drEmu(rowsCpu.size()),
      dwCpu(static_cast<size_t>(slots)), dwEmu(static_cast<size_t>(slots));
  fsdp_rt_moe_unpermute_grad(nullptr, dtype, rowsCpu.data(), iCpu.data(),
                             wCpu.data(), dy.data(), tokens, hidden, k, experts,
                             drCpu.data(), dwCpu.data());
  emu::launch(2, 1, 1, kMoEThreads, 0, [&] {
    moe::unpermuteGradRows<E>(row.data(), wCpu.data(), dy.data(), slots, hidden,
                              k, drEmu.data());
  });
  emu::launch(2, 1, 1, kMoEThreads, 0, [&] {
    moe::unpermuteGradWeights<E>(rowsCpu.data(), row.data(), dy.data(), slots,
                                 hidden, k, dwEmu.data());
  });
  ok = report(name, "unpermute_grad_rows",
              relError(widenAs<E>(drEmu), widenAs<E>(drCpu)), tol) &&
       ok;
  ok = report(name, "unpermute_grad_weights",
              relError(widenAs<E>(dwEmu), widenAs<E>(dwCpu)), tol) &&
       ok;

  // Grouped products on a buffer of `rows`: two sources' segments per
  // expert, some empty, 19 rows past them.
  std::vector<int64_t> seg(static_cast<size_t>(segments));
  int64_t left = slots;
  for (int64_t g = 0; g < segments; ++g) {
    seg[g] =
        g == segments - 1 ? left : (g % 3 == 1 ? 0 : std::min(left, g + 3));
    left -= seg[g];
  }
  std::vector<T> a = fill(static_cast<size_t>(rows * hidden)),
                 w = fill(static_cast<size_t>(experts * n * hidden));
  std::vector<T> oCpu(static_cast<size_t>(rows * n)),
      oEmu(oCpu.size(), fill(1)[0]);
  std::vector<int64_t> starts(static_cast<size_t>(segments + 1));
  fsdp_rt_grouped_linear(nullptr, dtype, a.data(), rows, hidden, seg.data(),
                         segments, w.data(), experts, n, oCpu.data());
  // The emulator runs whole warps; the kernel's other threads return.
  emu::launch(1, 1, 1, 32, 0,
              [&] { moe::segmentStarts(seg.data(), segments, starts.data()); });
  auto product = [&](const T *in, int64_t inner, int64_t cols, bool transB,
                     T *out) {
    emu::launch(unsigned((cols + moe::kTile - 1) / moe::kTile), 1,
                unsigned(segments), moe::kTile * moe::kTile, 0, [&] {
                  moe::groupedProduct<E>(in, seg.data(), starts.data(),
                                         w.data(), experts, inner, cols, transB,
                                         out);
                });
    emu::launch(2, 1, 1, kMoEThreads, 0, [&] {
      moe::zeroTail<E>(starts.data(), segments, rows, cols, out);
    });
  };
  product(a.data(), hidden, n, true, oEmu.data());
  ok = report(name, "grouped_linear",
              relError(widenAs<E>(oEmu), widenAs<E>(oCpu)), tol) &&
       ok;
  std::vector<T> g = fill(oCpu.size());
  std::vector<T> dxCpu(a.size()), dxEmu(a.size(), fill(1)[0]), dwtCpu(w.size()),
      dwtEmu(w.size());
  fsdp_rt_grouped_linear_grad(nullptr, dtype, a.data(), rows, hidden,
                              seg.data(), segments, w.data(), experts, n,
                              g.data(), dxCpu.data(), dwtCpu.data());
  product(g.data(), n, hidden, false, dxEmu.data());
  emu::launch(unsigned((hidden + moe::kTile - 1) / moe::kTile),
              unsigned((n + moe::kTile - 1) / moe::kTile), unsigned(experts),
              moe::kTile * moe::kTile, 0, [&] {
                moe::groupedWeightGrad<E>(a.data(), g.data(), seg.data(),
                                          starts.data(), segments, experts,
                                          hidden, n, dwtEmu.data());
              });
  ok = report(name, "grouped_linear_dx",
              relError(widenAs<E>(dxEmu), widenAs<E>(dxCpu)), tol) &&
       ok;
  ok = report(name, "grouped_linear_dw",
              relError(widenAs<E>(dwtEmu), widenAs<E>(dwtCpu)), tol) &&
       ok;

  // Load-balancing statistics and their gradient.
  std::vector<float> sCpu(static_cast<size_t>(2 * experts + 1)),
      sEmu(sCpu.size()), softmax(static_cast<size_t>(2 * tokens));
  std::vector<int64_t> chosen(static_cast<size_t>(slots));
  fsdp_rt_moe_aux_stats(nullptr, dtype, logits.data(), tokens, experts, k,
                        sCpu.data());
  emu::launch(2, 1, 1, kMoEThreads, 0, [&] {
    moe::routeStats<E>(logits.data(), tokens, experts, k, softmax.data(),
                       chosen.data());
  });
  emu::launch(2, 1, 1, kMoEThreads, 0, [&] {
    moe::auxStats<E>(logits.data(), softmax.data(), chosen.data(), tokens,
                     experts, k, sEmu.data());
  });
  ok = report(name, "aux_stats", relError(sEmu, sCpu), 1e-6) && ok;
  std::vector<float> ds(sCpu.size());
  for (float &v : ds)
    v = fill.scalar();
  std::vector<T> daCpu(logits.size()), daEmu(logits.size());
  fsdp_rt_moe_aux_stats_grad(nullptr, dtype, logits.data(), tokens, experts,
                             ds.data(), daCpu.data());
  emu::launch(2, 1, 1, kMoEThreads, 0, [&] {
    moe::auxStatsGrad<E>(logits.data(), ds.data(), tokens, experts,
                         daEmu.data());
  });
  ok = report(name, "aux_stats_grad",
              relError(widenAs<E>(daEmu), widenAs<E>(daCpu)), tol) &&
       ok;
  float lossCpu = 0, lossEmu = 0, one = 1.5f;
  std::vector<float> dcCpu(sCpu.size()), dcEmu(sCpu.size());
  fsdp_rt_moe_aux_combine(nullptr, sCpu.data(), experts, &lossCpu);
  fsdp_rt_moe_aux_combine_grad(nullptr, sCpu.data(), experts, &one,
                               dcCpu.data());
  emu::launch(1, 1, 1, 32, 0, [&] {
    moe::auxCombine(sCpu.data(), experts, &lossEmu);
    moe::auxCombineGrad(sCpu.data(), experts, &one, dcEmu.data());
  });
  ok = report(name, "aux_combine", relError({lossEmu}, {lossCpu}), 1e-6) && ok;
  return report(name, "aux_combine_grad", relError(dcEmu, dcCpu), 1e-6) && ok;
}

/// all_to_all_v as the NCCL transport runs it, for `n` members in one
/// process: each packs its rows into blocks of min(rows, resultRows) by its
/// send counts (packRows), block j of member i becomes block i of member
/// j's receive buffer (what NCCL's exchange does), and each unpacks by its
/// receive counts (unpackRows). Member s sends member d `counts(s, d)` rows
/// of `rowBytes`; every byte of every result must be the definition's.
bool runRows(const char *name, int n, int64_t inputRows, int64_t resultRows,
             int64_t rowBytes, int64_t (*counts)(int64_t, int64_t)) {
  int64_t capacity = std::min(inputRows, resultRows);
  int64_t block = capacity * rowBytes;
  std::vector<std::vector<char>> x(n), send(n), recv(n), out(n);
  std::vector<std::vector<int64_t>> sendCounts(n), recvCounts(n);
  for (int m = 0; m < n; ++m) {
    for (int64_t b = 0; b < inputRows * rowBytes; ++b)
      x[m].push_back(char(m * 37 + b * 11 + 1));
    for (int j = 0; j < n; ++j) {
      sendCounts[m].push_back(counts(m, j));
      recvCounts[m].push_back(counts(j, m));
    }
    send[m].assign(size_t(n * block), 0);
    recv[m].assign(size_t(n * block), 0);
    out[m].assign(size_t(resultRows * rowBytes), char(0x5a));
    emu::launch(rows::rowGrid(n * capacity), 1, 1, rows::kRowThreads, 0, [&] {
      rows::packRows(x[m].data(), sendCounts[m].data(), n, capacity, rowBytes,
                     send[m].data());
    });
  }
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      std::memcpy(recv[j].data() + i * block, send[i].data() + j * block,
                  size_t(block));
  int64_t wrong = 0;
  for (int m = 0; m < n; ++m) {
    emu::launch(rows::rowGrid(resultRows), 1, 1, rows::kRowThreads, 0, [&] {
      rows::unpackRows(recv[m].data(), recvCounts[m].data(), n, capacity,
                       rowBytes, out[m].data(), resultRows);
    });
    // Row r of the result: row k of what member j sent m, after the rows
    // j sent members 0..m-1; zeros past them.
    int64_t r = 0;
    for (int j = 0; j < n; ++j) {
      int64_t first = 0;
      for (int d = 0; d < m; ++d)
        first += counts(j, d);
      for (int64_t k = 0; k < counts(j, m); ++k, ++r)
        wrong += std::memcmp(out[m].data() + r * rowBytes,
                             x[j].data() + (first + k) * rowBytes,
                             size_t(rowBytes)) != 0;
    }
    for (; r < resultRows; ++r)
      for (int64_t b = 0; b < rowBytes; ++b)
        wrong += out[m][size_t(r * rowBytes + b)] != 0;
  }
  return report(name, "rows", double(wrong), 0);
}

int main() {
  const Case cases[] = {
      // GQA, causal, a sequence that ends inside a tile.
      {"bf16_causal_gqa_d64", false, 2, 100, 4, 2, 64, 1, 0, 0.125},
      // Sliding window shorter than a tile, MQA, three key tiles.
      {"bf16_window_mqa_d64", false, 1, 130, 2, 1, 64, 1, 40, 0.125},
      // Not causal, with a window: keys on both sides of each query.
      {"bf16_window_noncausal_mha_d64", false, 1, 64, 3, 3, 64, 0, 20, 0.2},
      // f16, head dim 128, full attention.
      {"f16_full_d128", true, 1, 70, 2, 2, 128, 0, 0, 0.0883883},
      // Head dim 32 (the device check's small model), two batch entries.
      {"bf16_causal_d32", false, 2, 80, 4, 2, 32, 1, 0, 0.1767767},
      // Context parallelism, cp 2, rank 0: chunks 0 and 3 of 128 queries
      // each over the gathered 512 keys; a ring step over chunks 1 and 2,
      // which chunk 0's queries do not see, with a statistics gradient;
      // a window of 100 that crosses the chunks.
      {"bf16_cp_all_gather_gqa_d64", false, 1, 256, 4, 2, 64, 1, 0, 0.125, 1},
      {"bf16_cp_ring_step_d64", false, 2, 256, 2, 2, 64, 1, 0, 0.125, 2, true},
      {"f16_cp_ring_window_d32", true, 1, 256, 2, 1, 32, 1, 100, 0.1767767, 2,
       true},
      // Packed rows: documents shorter and longer than a tile, one of a
      // single token; with GQA, with a window inside the documents, and at
      // cp 2 on a ring step whose keys are chunks 1 and 2.
      {"bf16_packed_gqa_d64", false, 2, 300, 4, 2, 64, 1, 0, 0.125, 0, false,
       true},
      {"f16_packed_window_d32", true, 1, 280, 2, 1, 32, 1, 50, 0.1767767, 0,
       false, true},
      {"bf16_cp_ring_packed_d64", false, 1, 256, 2, 2, 64, 1, 0, 0.125, 2, true,
       true},
      {"bf16_cp_all_gather_packed_d64", false, 1, 256, 4, 2, 64, 1, 0, 0.125, 1,
       false, true},
  };
  bool ok = true;
  for (const Case &c : cases)
    ok = (c.d == 32   ? dispatch<32>(c)
          : c.d == 64 ? dispatch<64>(c)
                      : dispatch<128>(c)) &&
         ok;
  const LossCase lossCases[] = {
      {"loss_f32_aligned", FSDP_RT_F32, 5, 1000, FSDP_RT_REDUCTION_NONE},
      {"loss_bf16_aligned", FSDP_RT_BF16, 5, 1000, FSDP_RT_REDUCTION_SUM},
      // Rows 1.. start off 16-byte boundaries: the scalar path and tails.
      {"loss_f16_unaligned", FSDP_RT_F16, 4, 1003, FSDP_RT_REDUCTION_MEAN},
      {"loss_bf16_long", FSDP_RT_BF16, 3, 20000, FSDP_RT_REDUCTION_NONE},
  };
  for (const LossCase &c : lossCases)
    ok = (c.dtype == FSDP_RT_F32    ? runLoss<portable::F32>(c)
          : c.dtype == FSDP_RT_BF16 ? runLoss<portable::BF16>(c)
                                    : runLoss<portable::F16>(c)) &&
         ok;
  ok = runCombine<portable::F32>("attention_combine_f32", FSDP_RT_F32) && ok;
  ok = runCombine<portable::BF16>("attention_combine_bf16", FSDP_RT_BF16) && ok;
  const NormCase normCases[] = {
      {"rms_norm_f32", FSDP_RT_F32, 11, 256},
      {"rms_norm_bf16", FSDP_RT_BF16, 20, 2048},
      // Rows of 100 f16 (200 bytes) are not all 16-byte aligned.
      {"rms_norm_f16_unaligned", FSDP_RT_F16, 9, 100},
  };
  for (const NormCase &c : normCases)
    ok = (c.dtype == FSDP_RT_F32    ? runNorm<portable::F32>(c)
          : c.dtype == FSDP_RT_BF16 ? runNorm<portable::BF16>(c)
                                    : runNorm<portable::F16>(c)) &&
         ok;
  // Sizes around the chunk, empty and one-element tensors; 45 tensors take
  // two launches.
  const int64_t chunk = adamw::kAdamWChunk;
  std::vector<int64_t> sizes = {chunk,         0,  1, chunk - 1, chunk + 1,
                                3 * chunk + 7, 100};
  while (sizes.size() < 45)
    sizes.push_back(int64_t(37 * sizes.size() % 500));
  ok = runAdamW<portable::F32>("adamw_multi_f32", FSDP_RT_F32, sizes, 0) && ok;
  ok = runAdamW<portable::BF16>("adamw_multi_bf16_strided", FSDP_RT_BF16, sizes,
                                3) &&
       ok;
  // Uneven counts with zeros, dropless (capacity: every row); a result
  // smaller than the operand (capacity: the result's rows).
  ok = runRows("all_to_all_v_rows_dropless", 3, 5, 15, 12,
               [](int64_t s, int64_t d) { return (s + 2 * d) % 3; }) &&
       ok;
  ok = runRows("all_to_all_v_rows_capped", 4, 6, 4, 6,
               [](int64_t s, int64_t d) { return (s + d) % 2; }) &&
       ok;
  ok = runMoE<portable::F32>("moe_f32_normalized", FSDP_RT_F32, true) && ok;
  ok = runMoE<portable::BF16>("moe_bf16", FSDP_RT_BF16, false) && ok;
  std::printf("%s\n", ok ? "all cases passed" : "FAILED");
  return ok ? 0 : 1;
}
