//===- kernel-test.cpp - Runs the CPU kernels on fixed inputs -------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// Usage: fsdp-runtime-kernel-test [--grad] <dir>
//
// Runs each kernel case on deterministic inputs and writes every operand and
// result to <dir>/<case>.<tensor>.bin (raw, row-major), with
// <dir>/manifest.txt describing them; check_kernels.py recomputes each case
// with PyTorch. --grad runs the backward and optimizer kernels instead of the
// forward ones. Only the public C ABI is used, as generated code would.
//
// Built with FSDP_KERNEL_TEST_CUDA it runs the CUDA backend: the tensors are
// CUDA managed memory, which both the kernels and this file's host code
// address, and every host read waits for the device first. The device check
// (test/device) compares its files with the CPU backend's.
//
//===----------------------------------------------------------------------===//

#include "fsdp/Runtime/Runtime.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <sys/stat.h>
#include <vector>

#ifdef FSDP_KERNEL_TEST_CUDA
#include <cuda_runtime_api.h>
#endif

namespace {

#ifdef FSDP_KERNEL_TEST_CUDA
void *testAlloc(size_t bytes) {
  void *ptr = nullptr;
  cudaError_t err = cudaMallocManaged(&ptr, std::max<size_t>(bytes, 1));
  if (err != cudaSuccess) {
    std::fprintf(stderr, "cudaMallocManaged(%zu): %s\n", bytes,
                 cudaGetErrorString(err));
    std::exit(1);
  }
  return ptr;
}
void testFree(void *ptr) { cudaFree(ptr); }
/// Waits for every kernel launched so far, before the host touches memory.
void hostSync() {
  cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    std::fprintf(stderr, "a kernel failed: %s\n", cudaGetErrorString(err));
    std::exit(1);
  }
}
#else
void *testAlloc(size_t bytes) {
  return std::malloc(std::max<size_t>(bytes, 1));
}
void testFree(void *ptr) { std::free(ptr); }
void hostSync() {}
#endif

const char *dtypeName(fsdp_rt_dtype dtype) {
  static const char *names[] = {"f32", "bf16", "f16", "i32", "i64"};
  return names[dtype];
}

/// A tensor owned by the test: zero-initialized bytes (memory the backend's
/// kernels address) plus type and shape. Copies are deep.
struct Tensor {
  fsdp_rt_dtype dtype;
  std::vector<int64_t> shape;
  size_t size = 0;
  char *bytes = nullptr;

  Tensor(fsdp_rt_dtype dtype, std::vector<int64_t> shape)
      : dtype(dtype), shape(std::move(shape)) {
    size = size_t(numel()) * fsdp_rt_dtype_size(dtype);
    bytes = static_cast<char *>(testAlloc(size));
    // Host writes to managed memory wait for running kernels (which a
    // GPU without concurrent managed access requires).
    hostSync();
    std::memset(bytes, 0, size);
  }
  // The delegated constructor has waited for the device.
  Tensor(const Tensor &other) : Tensor(other.dtype, other.shape) {
    std::memcpy(bytes, other.bytes, size);
  }
  Tensor(Tensor &&other) noexcept
      : dtype(other.dtype), shape(std::move(other.shape)), size(other.size),
        bytes(other.bytes) {
    other.bytes = nullptr;
  }
  Tensor &operator=(Tensor other) {
    std::swap(dtype, other.dtype);
    std::swap(shape, other.shape);
    std::swap(size, other.size);
    std::swap(bytes, other.bytes);
    return *this;
  }
  ~Tensor() {
    if (bytes) {
      // A kernel may still read it.
      hostSync();
      testFree(bytes);
    }
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }
  int rank() const { return int(shape.size()); }
  void *data() { return bytes; }
  template <typename T> T *as() { return reinterpret_cast<T *>(data()); }
};

uint64_t rngState = 0x9e3779b97f4a7c15ull;

/// Uniform in [-1, 1), from a fixed 64-bit LCG so runs are reproducible.
float nextUniform() {
  rngState = rngState * 6364136223846793005ull + 1442695040888963407ull;
  return float((rngState >> 40) * (1.0 / (1ull << 24))) * 2.0f - 1.0f;
}

/// A float tensor of `dtype` with values uniform in [-range, range).
Tensor randomFloat(fsdp_rt_dtype dtype, std::vector<int64_t> shape,
                   float range = 1.0f) {
  Tensor f32(FSDP_RT_F32, shape);
  for (int64_t i = 0; i < f32.numel(); ++i)
    f32.as<float>()[i] = range * nextUniform();
  if (dtype == FSDP_RT_F32)
    return f32;
  Tensor t(dtype, shape);
  fsdp_rt_cast(nullptr, FSDP_RT_F32, f32.data(), dtype, f32.numel(), t.data());
  return t;
}

/// An index tensor with values in [0, bound).
Tensor randomIndex(fsdp_rt_dtype dtype, std::vector<int64_t> shape,
                   int64_t bound) {
  Tensor t(dtype, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) {
    int64_t v = int64_t((nextUniform() + 1.0f) * 0.5f * bound) % bound;
    if (dtype == FSDP_RT_I32)
      t.as<int32_t>()[i] = int32_t(v);
    else
      t.as<int64_t>()[i] = v;
  }
  return t;
}

/// Writes the tensors and attributes of the cases to the output directory.
class Writer {
public:
  explicit Writer(std::string dir) : dir(std::move(dir)) {
    manifest = std::fopen((this->dir + "/manifest.txt").c_str(), "w");
  }
  ~Writer() {
    if (manifest)
      std::fclose(manifest);
  }
  bool ok() const { return manifest != nullptr; }

  /// Starts a case checked against the reference of `op`.
  void begin(const std::string &name, const std::string &op) {
    current = name;
    std::fprintf(manifest, "case %s %s\n", name.c_str(), op.c_str());
  }
  void attr(const std::string &key, const std::string &value) {
    std::fprintf(manifest, "attr %s %s\n", key.c_str(), value.c_str());
  }
  void attr(const std::string &key, double value) {
    std::fprintf(manifest, "attr %s %.17g\n", key.c_str(), value);
  }
  /// Records `t` as operand (`role` "in") or result ("out") named `name`.
  void tensor(const char *role, const std::string &name, Tensor &t) {
    std::string file = current + "." + name + ".bin";
    std::fprintf(manifest, "%s %s %s %s", role, name.c_str(),
                 dtypeName(t.dtype), file.c_str());
    for (int64_t d : t.shape)
      std::fprintf(manifest, " %lld", (long long)d);
    std::fprintf(manifest, "\n");
    hostSync();
    FILE *f = std::fopen((dir + "/" + file).c_str(), "wb");
    std::fwrite(t.bytes, 1, t.size, f);
    std::fclose(f);
  }

private:
  std::string dir;
  std::string current;
  FILE *manifest = nullptr;
};

void linearCase(Writer &w, const char *name, fsdp_rt_dtype dt, bool hasBias) {
  Tensor x = randomFloat(dt, {2, 3, 16}), weight = randomFloat(dt, {8, 16}),
         bias = randomFloat(dt, {8}), out(dt, {2, 3, 8});
  fsdp_rt_linear(nullptr, dt, x.data(), weight.data(),
                 hasBias ? bias.data() : nullptr, 6, 16, 8, out.data());
  w.begin(name, "linear");
  w.tensor("in", "x", x);
  w.tensor("in", "weight", weight);
  if (hasBias)
    w.tensor("in", "bias", bias);
  w.tensor("out", "out", out);
}

void matmulCase(Writer &w, const char *name, fsdp_rt_dtype dt, bool batched,
                bool ta, bool tb) {
  const int64_t m = 5, k = 7, n = 4;
  std::vector<int64_t> aShape = {2, 3, ta ? k : m, ta ? m : k};
  std::vector<int64_t> bShape = {tb ? n : k, tb ? k : n};
  if (batched)
    bShape.insert(bShape.begin(), {2, 3});
  Tensor a = randomFloat(dt, aShape), b = randomFloat(dt, bShape),
         out(dt, {2, 3, m, n});
  if (batched)
    fsdp_rt_batch_matmul(nullptr, dt, a.data(), b.data(), 6, m, k, n, ta, tb,
                         out.data());
  else
    fsdp_rt_matmul(nullptr, dt, a.data(), b.data(), 6, m, k, n, ta, tb,
                   out.data());
  w.begin(name, batched ? "batch_matmul" : "matmul");
  w.attr("transpose_a", ta);
  w.attr("transpose_b", tb);
  w.tensor("in", "a", a);
  w.tensor("in", "b", b);
  w.tensor("out", "out", out);
}

using BinaryFn = void (*)(fsdp_rt_stream, fsdp_rt_dtype, const void *,
                          const int64_t *, int, const void *, const int64_t *,
                          int, const int64_t *, int, void *);

void binaryCase(Writer &w, const char *name, const char *op, BinaryFn fn,
                fsdp_rt_dtype dt, std::vector<int64_t> xShape,
                std::vector<int64_t> yShape, std::vector<int64_t> outShape) {
  Tensor x = randomFloat(dt, xShape), y = randomFloat(dt, yShape),
         out(dt, outShape);
  fn(nullptr, dt, x.data(), x.shape.data(), x.rank(), y.data(), y.shape.data(),
     y.rank(), out.shape.data(), out.rank(), out.data());
  w.begin(name, op);
  w.tensor("in", "x", x);
  w.tensor("in", "y", y);
  w.tensor("out", "out", out);
}

/// Runs a unary kernel `fn(x, numel, out)` on values in [-4, 4).
template <typename Fn>
void unaryCase(Writer &w, const char *name, const char *op, fsdp_rt_dtype dt,
               Fn fn) {
  Tensor x = randomFloat(dt, {3, 5, 7}, 4.0f), out(dt, {3, 5, 7});
  fn(x.data(), x.numel(), out.data());
  w.begin(name, op);
  w.tensor("in", "x", x);
  w.tensor("out", "out", out);
}

void normCase(Writer &w, const char *name, fsdp_rt_dtype dt, bool layer,
              bool hasBias) {
  // An offset mean makes the layer-norm centring matter.
  Tensor x = randomFloat(dt, {2, 3, 32}, 3.0f), weight = randomFloat(dt, {32}),
         bias = randomFloat(dt, {32}), out(dt, {2, 3, 32});
  const double eps = 1e-5;
  if (layer)
    fsdp_rt_layer_norm(nullptr, dt, x.data(), weight.data(),
                       hasBias ? bias.data() : nullptr, 6, 32, eps, out.data());
  else
    fsdp_rt_rms_norm(nullptr, dt, x.data(), weight.data(), 6, 32, eps,
                     out.data());
  w.begin(name, layer ? "layer_norm" : "rms_norm");
  w.attr("eps", eps);
  w.tensor("in", "x", x);
  w.tensor("in", "weight", weight);
  if (hasBias)
    w.tensor("in", "bias", bias);
  w.tensor("out", "out", out);
}

/// Small shapes by default; the flash cases pass a sequence longer than
/// one 64-row tile and a head dim of 64 or 128 (d = dv).
void attentionCase(Writer &w, const char *name, fsdp_rt_dtype dt, bool causal,
                   int64_t window, int64_t nq, int64_t nkv, int64_t dv,
                   double scale, int64_t b = 2, int64_t s = 9, int64_t d = 8) {
  Tensor q = randomFloat(dt, {b, s, nq, d}, 2.0f),
         k = randomFloat(dt, {b, s, nkv, d}, 2.0f),
         v = randomFloat(dt, {b, s, nkv, dv}), out(dt, {b, s, nq, dv}),
         lse(FSDP_RT_F32, {b, nq, s});
  fsdp_rt_attention(nullptr, dt, q.data(), k.data(), v.data(), b, s, s, nq, nkv,
                    d, dv, nullptr, nullptr, nullptr, causal, window, scale,
                    out.data(), lse.as<float>());
  w.begin(name, "attention");
  w.attr("causal", causal);
  w.attr("sliding_window", double(window));
  w.attr("scale", scale);
  w.tensor("in", "q", q);
  w.tensor("in", "k", k);
  w.tensor("in", "v", v);
  w.tensor("out", "out", out);
  w.tensor("out", "lse", lse);
}

void crossEntropyCase(Writer &w, const char *name, fsdp_rt_reduction reduction,
                      const char *reductionName, fsdp_rt_dtype dt) {
  const int64_t rows = 12, vocab = 50;
  // Large logits check the max subtraction.
  Tensor logits = randomFloat(dt, {3, 4, vocab}, 30.0f),
         labels = randomIndex(FSDP_RT_I64, {3, 4}, vocab),
         out(FSDP_RT_F32, reduction == FSDP_RT_REDUCTION_NONE
                              ? std::vector<int64_t>{3, 4}
                              : std::vector<int64_t>{}),
         count(FSDP_RT_I64, {});
  labels.as<int64_t>()[2] = -100;
  labels.as<int64_t>()[7] = -100;
  fsdp_rt_cross_entropy(nullptr, dt, logits.data(), FSDP_RT_I64, labels.data(),
                        rows, vocab, -100, reduction, out.as<float>(),
                        count.as<int64_t>());
  w.begin(name, "cross_entropy");
  w.attr("ignore_index", -100);
  w.attr("reduction", reductionName);
  w.tensor("in", "logits", logits);
  w.tensor("in", "labels", labels);
  w.tensor("out", "out", out);
  w.tensor("out", "count", count);
}

/// f32 values that exercise rounding, overflow and subnormals of the casts.
Tensor castInputs() {
  const float special[] = {65504.0f,
                           65519.0f,
                           65520.0f,
                           1e-8f,
                           6e-5f,
                           std::ldexp(1.0f, -25),
                           3 * std::ldexp(1.0f, -25),
                           std::ldexp(1.0f, -14),
                           1.0f + std::ldexp(1.0f, -8),
                           1.0f + 3 * std::ldexp(1.0f, -8),
                           3.0e38f,
                           -0.0f,
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN()};
  const int64_t numSpecial = sizeof(special) / sizeof(special[0]);
  Tensor t = randomFloat(FSDP_RT_F32, {numSpecial + 49}, 100.0f);
  std::memcpy(t.data(), special, sizeof(special));
  return t;
}

void castCase(Writer &w, const char *name, fsdp_rt_dtype from,
              fsdp_rt_dtype to) {
  Tensor f32 = castInputs();
  Tensor x(from, f32.shape), out(to, f32.shape);
  fsdp_rt_cast(nullptr, FSDP_RT_F32, f32.data(), from, x.numel(), x.data());
  fsdp_rt_cast(nullptr, from, x.data(), to, x.numel(), out.data());
  w.begin(name, "cast");
  w.tensor("in", "x", x);
  w.tensor("out", "out", out);
}

void runAll(Writer &w) {
  const fsdp_rt_dtype f32 = FSDP_RT_F32, bf16 = FSDP_RT_BF16, f16 = FSDP_RT_F16;

  for (fsdp_rt_dtype idsType : {FSDP_RT_I64, FSDP_RT_I32}) {
    Tensor table = randomFloat(f32, {11, 6}),
           ids = randomIndex(idsType, {2, 5}, 11), out(f32, {2, 5, 6});
    fsdp_rt_embedding(nullptr, f32, table.data(), 11, 6, 0, idsType, ids.data(),
                      ids.numel(), out.data());
    w.begin(idsType == FSDP_RT_I64 ? "embedding" : "embedding_i32",
            "embedding");
    w.tensor("in", "table", table);
    w.tensor("in", "ids", ids);
    w.tensor("out", "out", out);
  }

  linearCase(w, "linear", f32, true);
  linearCase(w, "linear_nobias", f32, false);
  linearCase(w, "linear_bf16", bf16, true);
  // f16 products where oneDNN has no f16 kernel (no AVX-512 FP16) take the
  // widening path: the same result through f32.
  linearCase(w, "linear_f16", f16, true);

  matmulCase(w, "matmul", f32, false, false, false);
  matmulCase(w, "matmul_ta", f32, false, true, false);
  matmulCase(w, "matmul_tb", f32, false, false, true);
  matmulCase(w, "matmul_ta_tb", f32, false, true, true);
  matmulCase(w, "batch_matmul", f32, true, false, false);
  matmulCase(w, "batch_matmul_ta_tb", f32, true, true, true);
  matmulCase(w, "batch_matmul_bf16", bf16, true, false, true);
  matmulCase(w, "matmul_ta_bf16", bf16, false, true, false);
  matmulCase(w, "batch_matmul_ta_tb_f16", f16, true, true, true);

  binaryCase(w, "add", "add", fsdp_rt_add, f32, {2, 3, 4}, {4}, {2, 3, 4});
  binaryCase(w, "sub", "sub", fsdp_rt_sub, f32, {2, 1, 4}, {3, 1}, {2, 3, 4});
  binaryCase(w, "mul", "mul", fsdp_rt_mul, f32, {3, 4}, {2, 3, 4}, {2, 3, 4});
  binaryCase(w, "mul_scalar", "mul", fsdp_rt_mul, f32, {2, 5}, {}, {2, 5});
  binaryCase(w, "add_bf16", "add", fsdp_rt_add, bf16, {2, 3, 1}, {1, 4},
             {2, 3, 4});

  unaryCase(w, "neg", "neg", f32, [&](void *x, int64_t n, void *o) {
    fsdp_rt_neg(nullptr, f32, x, n, o);
  });
  unaryCase(w, "scale", "scale", f32, [&](void *x, int64_t n, void *o) {
    fsdp_rt_scale(nullptr, f32, x, n, 0.125, o);
  });
  w.attr("factor", 0.125);
  // Every activation of Activations.def, in f32 and bf16; the checker's
  // reference is torch.nn.functional's function of the same name.
#define FSDP_ACTIVATION(name, forward, gradient)                               \
  for (fsdp_rt_dtype dt : {f32, bf16}) {                                       \
    unaryCase(w, dt == f32 ? #name : #name "_bf16", #name, dt,                 \
              [&](void *x, int64_t n, void *o) {                               \
                fsdp_rt_##name(nullptr, dt, x, n, o);                          \
              });                                                              \
    w.attr("activation", #name);                                               \
  }
#include "fsdp/Runtime/Activations.def"
  unaryCase(w, "gelu", "gelu", f32, [&](void *x, int64_t n, void *o) {
    fsdp_rt_gelu(nullptr, f32, x, n, 0, o);
  });
  w.attr("approximate", "none");
  unaryCase(w, "gelu_tanh", "gelu", f32, [&](void *x, int64_t n, void *o) {
    fsdp_rt_gelu(nullptr, f32, x, n, 1, o);
  });
  w.attr("approximate", "tanh");

  normCase(w, "rms_norm", f32, false, false);
  normCase(w, "rms_norm_bf16", bf16, false, false);
  normCase(w, "layer_norm", f32, true, true);
  normCase(w, "layer_norm_nobias", f32, true, false);

  for (fsdp_rt_dtype dt : {f32, bf16}) {
    const int64_t b = 2, s = 5, heads = 3, d = 8;
    Tensor x = randomFloat(dt, {b, s, heads, d}),
           pos = randomIndex(FSDP_RT_I64, {b, s}, 4096), out(dt, x.shape);
    fsdp_rt_rotary(nullptr, dt, x.data(), FSDP_RT_I64, pos.data(), b, s, heads,
                   d, 10000.0, nullptr, 1.0, out.data());
    w.begin(dt == f32 ? "rotary" : "rotary_bf16", "rotary");
    w.attr("theta", 10000.0);
    w.tensor("in", "x", x);
    w.tensor("in", "positions", pos);
    w.tensor("out", "out", out);
  }
  {
    // A scaled RoPE: its own frequencies and an attention factor.
    const int64_t b = 2, s = 5, heads = 3, d = 8;
    const double freq[] = {1.0, 0.05, 3e-3, 1e-4};
    Tensor x = randomFloat(f32, {b, s, heads, d}),
           pos = randomIndex(FSDP_RT_I64, {b, s}, 4096), out(f32, x.shape);
    fsdp_rt_rotary(nullptr, f32, x.data(), FSDP_RT_I64, pos.data(), b, s, heads,
                   d, 10000.0, freq, 1.25, out.data());
    w.begin("rotary_scaled", "rotary");
    w.attr("theta", 10000.0);
    w.attr("inv_freq", "1.0,0.05,3e-3,1e-4");
    w.attr("scaling", 1.25);
    w.tensor("in", "x", x);
    w.tensor("in", "positions", pos);
    w.tensor("out", "out", out);
  }

  attentionCase(w, "attention_causal_gqa", f32, true, 0, 4, 2, 8,
                1.0 / std::sqrt(8.0));
  attentionCase(w, "attention_sliding_window", f32, true, 3, 4, 1, 8,
                1.0 / std::sqrt(8.0));
  attentionCase(w, "attention_full", f32, false, 0, 2, 2, 5, 0.3);
  attentionCase(w, "attention_bf16", bf16, true, 0, 4, 2, 8,
                1.0 / std::sqrt(8.0));

  for (int dim : {-1, 1}) {
    Tensor x = randomFloat(f32, {2, 3, 4}, 20.0f), out(f32, x.shape);
    fsdp_rt_softmax(nullptr, f32, x.data(), x.shape.data(), x.rank(), dim,
                    out.data());
    w.begin(dim == -1 ? "softmax" : "softmax_dim1", "softmax");
    w.attr("dim", dim);
    w.tensor("in", "x", x);
    w.tensor("out", "out", out);
  }

  {
    Tensor x = randomFloat(f32, {2, 3, 4, 5}), out(f32, {4, 2, 5, 3});
    const int64_t perm[] = {2, 0, 3, 1};
    fsdp_rt_transpose(nullptr, f32, x.data(), x.shape.data(), x.rank(), perm,
                      out.data());
    w.begin("transpose", "transpose");
    w.attr("perm", "2,0,3,1");
    w.tensor("in", "x", x);
    w.tensor("out", "out", out);
  }
  {
    Tensor x = randomIndex(FSDP_RT_I64, {2, 6, 3}, 1000),
           out(FSDP_RT_I64, {2, 2, 3});
    fsdp_rt_slice(nullptr, FSDP_RT_I64, x.data(), x.shape.data(), x.rank(), -2,
                  3, 2, out.data());
    w.begin("slice_i64", "slice");
    w.attr("dim", -2);
    w.attr("start", 3);
    w.attr("size", 2);
    w.tensor("in", "x", x);
    w.tensor("out", "out", out);
  }
  {
    Tensor a = randomFloat(bf16, {2, 1, 4}), b = randomFloat(bf16, {2, 3, 4}),
           out(bf16, {2, 4, 4});
    const void *inputs[] = {a.data(), b.data()};
    const int64_t sizes[] = {1, 3};
    fsdp_rt_concat(nullptr, bf16, 2, inputs, sizes, out.shape.data(),
                   out.rank(), 1, out.data());
    w.begin("concat_bf16", "concat");
    w.attr("dim", 1);
    w.tensor("in", "x0", a);
    w.tensor("in", "x1", b);
    w.tensor("out", "out", out);
  }
  {
    Tensor x = randomFloat(f32, {3, 7}), out(f32, {7, 3});
    fsdp_rt_copy(nullptr, f32, x.data(), x.numel(), out.data());
    w.begin("copy", "reshape");
    w.tensor("in", "x", x);
    w.tensor("out", "out", out);
  }

  castCase(w, "cast_f32_bf16", f32, bf16);
  castCase(w, "cast_f32_f16", f32, FSDP_RT_F16);
  castCase(w, "cast_bf16_f32", bf16, f32);
  castCase(w, "cast_f16_f32", FSDP_RT_F16, f32);
  castCase(w, "cast_bf16_f16", bf16, FSDP_RT_F16);
  castCase(w, "cast_f16_bf16", FSDP_RT_F16, bf16);

  crossEntropyCase(w, "cross_entropy_mean", FSDP_RT_REDUCTION_MEAN, "mean",
                   f32);
  crossEntropyCase(w, "cross_entropy_sum", FSDP_RT_REDUCTION_SUM, "sum", f32);
  crossEntropyCase(w, "cross_entropy_none", FSDP_RT_REDUCTION_NONE, "none",
                   f32);
  crossEntropyCase(w, "cross_entropy_bf16", FSDP_RT_REDUCTION_MEAN, "mean",
                   bf16);

  // Shapes the CUDA backend's flash kernels take (last, so that the
  // cases above keep their random inputs).
  attentionCase(w, "attention_flash_bf16", bf16, true, 0, 4, 2, 64, 0.125, 2,
                100, 64);
  attentionCase(w, "attention_flash_window_f16", f16, true, 40, 2, 1, 128,
                0.0883883, 1, 130, 128);
  attentionCase(w, "attention_flash_noncausal_bf16", bf16, false, 20, 3, 3, 64,
                0.2, 1, 64, 64);
}

//===----------------------------------------------------------------------===//
// Backward and optimizer kernels (--grad)
//===----------------------------------------------------------------------===//

/// Runs `fn(x, dy, numel, dx)`, the gradient of a unary kernel, on x in
/// [-4, 4).
template <typename Fn>
void unaryGradCase(Writer &w, const char *name, const char *op,
                   fsdp_rt_dtype dt, Fn fn) {
  Tensor x = randomFloat(dt, {3, 5, 7}, 4.0f), dy = randomFloat(dt, x.shape),
         dx(dt, x.shape);
  fn(x.data(), dy.data(), x.numel(), dx.data());
  w.begin(name, op);
  w.tensor("in", "x", x);
  w.tensor("in", "dy", dy);
  w.tensor("out", "dx", dx);
}

void normGradCase(Writer &w, const char *name, fsdp_rt_dtype dt, bool layer,
                  bool hasBias) {
  const int64_t rows = 6, h = 32;
  const double eps = 1e-5;
  Tensor x = randomFloat(dt, {2, 3, h}, 3.0f), weight = randomFloat(dt, {h}),
         dy = randomFloat(dt, x.shape), dx(dt, x.shape), dweight(dt, {h}),
         dbias(dt, {h});
  if (layer)
    fsdp_rt_layer_norm_grad(nullptr, dt, x.data(), weight.data(), dy.data(),
                            rows, h, eps, dx.data(), dweight.data(),
                            hasBias ? dbias.data() : nullptr);
  else
    fsdp_rt_rms_norm_grad(nullptr, dt, x.data(), weight.data(), dy.data(), rows,
                          h, eps, dx.data(), dweight.data());
  w.begin(name, layer ? "layer_norm_grad" : "rms_norm_grad");
  w.attr("eps", eps);
  w.tensor("in", "x", x);
  w.tensor("in", "weight", weight);
  w.tensor("in", "dy", dy);
  w.tensor("out", "dx", dx);
  w.tensor("out", "dweight", dweight);
  if (hasBias)
    w.tensor("out", "dbias", dbias);
}

void attentionGradCase(Writer &w, const char *name, fsdp_rt_dtype dt,
                       bool causal, int64_t window, int64_t nq, int64_t nkv,
                       int64_t dv, double scale, int64_t b = 2, int64_t s = 9,
                       int64_t d = 8) {
  Tensor q = randomFloat(dt, {b, s, nq, d}, 2.0f),
         k = randomFloat(dt, {b, s, nkv, d}, 2.0f),
         v = randomFloat(dt, {b, s, nkv, dv}),
         dout = randomFloat(dt, {b, s, nq, dv}), dq(dt, q.shape),
         dk(dt, k.shape), dvalue(dt, v.shape), out(dt, {b, s, nq, dv}),
         lse(FSDP_RT_F32, {b, nq, s});
  // The backward reads the forward's statistics.
  fsdp_rt_attention(nullptr, dt, q.data(), k.data(), v.data(), b, s, s, nq, nkv,
                    d, dv, nullptr, nullptr, nullptr, causal, window, scale,
                    out.data(), lse.as<float>());
  fsdp_rt_attention_grad(nullptr, dt, q.data(), k.data(), v.data(), out.data(),
                         lse.as<float>(), dout.data(), nullptr, b, s, s, nq,
                         nkv, d, dv, nullptr, nullptr, nullptr, causal, window,
                         scale, dq.data(), dk.data(), dvalue.data());
  w.begin(name, "attention_grad");
  w.attr("causal", causal);
  w.attr("sliding_window", double(window));
  w.attr("scale", scale);
  w.tensor("in", "q", q);
  w.tensor("in", "k", k);
  w.tensor("in", "v", v);
  w.tensor("in", "dout", dout);
  w.tensor("out", "dq", dq);
  w.tensor("out", "dk", dk);
  w.tensor("out", "dv", dvalue);
}

void crossEntropyGradCase(Writer &w, const char *name,
                          fsdp_rt_reduction reduction,
                          const char *reductionName, fsdp_rt_dtype dt) {
  const int64_t rows = 12, vocab = 50;
  bool none = reduction == FSDP_RT_REDUCTION_NONE;
  Tensor logits = randomFloat(dt, {3, 4, vocab}, 30.0f),
         labels = randomIndex(FSDP_RT_I32, {3, 4}, vocab),
         dloss = randomFloat(FSDP_RT_F32, none ? std::vector<int64_t>{3, 4}
                                               : std::vector<int64_t>{}),
         dlogits(dt, logits.shape);
  labels.as<int32_t>()[2] = -100;
  labels.as<int32_t>()[7] = -100;
  fsdp_rt_cross_entropy_grad(nullptr, dt, logits.data(), FSDP_RT_I32,
                             labels.data(), rows, vocab, -100, reduction,
                             dloss.as<float>(), dlogits.data());
  w.begin(name, "cross_entropy_grad");
  w.attr("ignore_index", -100);
  w.attr("reduction", reductionName);
  w.tensor("in", "logits", logits);
  w.tensor("in", "labels", labels);
  w.tensor("in", "dloss", dloss);
  w.tensor("out", "dlogits", dlogits);
}

void reduceSumToCase(Writer &w, const char *name, fsdp_rt_dtype dt,
                     std::vector<int64_t> inShape,
                     std::vector<int64_t> outShape) {
  Tensor x = randomFloat(dt, inShape), out(dt, outShape);
  fsdp_rt_reduce_sum_to(nullptr, dt, x.data(), x.shape.data(), x.rank(),
                        out.shape.data(), out.rank(), out.data());
  w.begin(name, "reduce_sum_to");
  w.tensor("in", "x", x);
  w.tensor("out", "out", out);
}

/// Three optimizer steps on one f32 parameter from zero state, with grads of
/// `gradType` scaled by 0.5; records the grads and the final state. With
/// `pieces`, AdamW's table cuts the parameter into that many tensors of
/// many sizes (none, one element, more than a CUDA chunk; more tensors than
/// one CUDA launch takes): elementwise, the result is the one-tensor
/// update's, which is what is recorded.
void optimizerCase(Writer &w, const char *name, bool adam, double momentum,
                   fsdp_rt_dtype gradType, int pieces = 1,
                   int64_t single = 37) {
  std::vector<int64_t> sizes;
  for (int k = 0; k < pieces; ++k)
    sizes.push_back(pieces == 1 ? single
                    : k == 0    ? 5000
                    : k == 1    ? 0
                    : k == 2    ? 1
                                : 17 * k % 300);
  int64_t n = std::accumulate(sizes.begin(), sizes.end(), int64_t(0));
  const int64_t steps = 3;
  const double lr = 0.01, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, wd = 0.1;
  // A runtime buffer, as the step's clipping coefficient is.
  const float gradScale = 0.5f;
  Tensor scale(FSDP_RT_F32, {});
  scale.as<float>()[0] = gradScale;
  Tensor param0 = randomFloat(FSDP_RT_F32, {n}), param = param0,
         m(FSDP_RT_F32, {n}), v(FSDP_RT_F32, {n});
  std::fill(m.as<float>(), m.as<float>() + n, 0.0f);
  std::fill(v.as<float>(), v.as<float>() + n, 0.0f);
  std::vector<Tensor> grads;
  // The step count is a runtime buffer as well, one per step: a kernel may
  // still read the last one.
  std::vector<Tensor> counts;
  for (int64_t step = 1; step <= steps; ++step) {
    counts.emplace_back(FSDP_RT_F32, std::vector<int64_t>{});
    counts.back().as<float>()[0] = float(step);
    grads.push_back(randomFloat(gradType, {n}));
    if (adam) {
      // In place: the same buffers in and out.
      std::vector<fsdp_rt_adamw_tensor> tensors;
      int64_t at = 0;
      size_t gradBytes = fsdp_rt_dtype_size(gradType);
      for (int64_t size : sizes) {
        float *p = param.as<float>() + at, *mp = m.as<float>() + at,
              *vp = v.as<float>() + at;
        tensors.push_back(
            {p, mp, vp, p, mp, vp,
             static_cast<char *>(grads.back().data()) + at * gradBytes, size});
        at += size;
      }
      fsdp_rt_adamw(nullptr, int64_t(tensors.size()), tensors.data(), gradType,
                    lr, beta1, beta2, eps, wd, counts.back().as<float>(),
                    scale.as<float>(), nullptr);
    } else
      fsdp_rt_sgd(nullptr, param.as<float>(),
                  momentum != 0 ? m.as<float>() : nullptr, gradType,
                  grads.back().data(), n, lr, momentum, wd,
                  counts.back().as<float>(), scale.as<float>(), nullptr);
  }
  w.begin(name, adam ? "adamw" : "sgd");
  w.attr("lr", lr);
  w.attr("weight_decay", wd);
  w.attr("grad_scale", gradScale);
  if (adam) {
    w.attr("beta1", beta1);
    w.attr("beta2", beta2);
    w.attr("eps", eps);
  } else {
    w.attr("momentum", momentum);
  }
  w.tensor("in", "param0", param0);
  for (int64_t i = 0; i < steps; ++i)
    w.tensor("in", "grad" + std::to_string(i), grads[i]);
  w.tensor("out", "param", param);
  if (adam) {
    w.tensor("out", "exp_avg", m);
    w.tensor("out", "exp_avg_sq", v);
  } else if (momentum != 0) {
    w.tensor("out", "momentum_buffer", m);
  }
}

void runGrad(Writer &w) {
  const fsdp_rt_dtype f32 = FSDP_RT_F32, bf16 = FSDP_RT_BF16, f16 = FSDP_RT_F16;

#define FSDP_ACTIVATION(name, forward, gradient)                               \
  for (fsdp_rt_dtype dt : {f32, bf16}) {                                       \
    unaryGradCase(w, dt == f32 ? #name "_grad" : #name "_grad_bf16",           \
                  #name "_grad", dt,                                           \
                  [&](void *x, void *dy, int64_t n, void *dx) {                \
                    fsdp_rt_##name##_grad(nullptr, dt, x, dy, n, dx);          \
                  });                                                          \
    w.attr("activation", #name);                                               \
  }
#include "fsdp/Runtime/Activations.def"
  unaryGradCase(w, "gelu_grad", "gelu_grad", f32,
                [&](void *x, void *dy, int64_t n, void *dx) {
                  fsdp_rt_gelu_grad(nullptr, f32, x, dy, n, 0, dx);
                });
  w.attr("approximate", "none");
  unaryGradCase(w, "gelu_grad_tanh", "gelu_grad", f32,
                [&](void *x, void *dy, int64_t n, void *dx) {
                  fsdp_rt_gelu_grad(nullptr, f32, x, dy, n, 1, dx);
                });
  w.attr("approximate", "tanh");

  normGradCase(w, "rms_norm_grad", f32, false, false);
  normGradCase(w, "rms_norm_grad_bf16", bf16, false, false);
  normGradCase(w, "layer_norm_grad", f32, true, true);
  normGradCase(w, "layer_norm_grad_nobias", f32, true, false);

  for (fsdp_rt_dtype dt : {f32, bf16}) {
    const int64_t b = 2, s = 5, heads = 3, d = 8;
    Tensor dy = randomFloat(dt, {b, s, heads, d}),
           pos = randomIndex(FSDP_RT_I64, {b, s}, 4096), dx(dt, dy.shape);
    fsdp_rt_rotary_grad(nullptr, dt, dy.data(), FSDP_RT_I64, pos.data(), b, s,
                        heads, d, 10000.0, nullptr, 1.0, dx.data());
    w.begin(dt == f32 ? "rotary_grad" : "rotary_grad_bf16", "rotary_grad");
    w.attr("theta", 10000.0);
    w.tensor("in", "dy", dy);
    w.tensor("in", "positions", pos);
    w.tensor("out", "dx", dx);
  }

  attentionGradCase(w, "attention_grad_causal_gqa", f32, true, 0, 4, 2, 8,
                    1.0 / std::sqrt(8.0));
  attentionGradCase(w, "attention_grad_sliding_window", f32, true, 3, 4, 1, 8,
                    1.0 / std::sqrt(8.0));
  attentionGradCase(w, "attention_grad_full", f32, false, 0, 2, 2, 5, 0.3);
  attentionGradCase(w, "attention_grad_window_noncausal", f32, false, 4, 6, 2,
                    8, 0.35);
  attentionGradCase(w, "attention_grad_bf16", bf16, true, 0, 4, 2, 8,
                    1.0 / std::sqrt(8.0));

  for (int dim : {-1, 1}) {
    Tensor x = randomFloat(f32, {2, 3, 4}, 5.0f), y(f32, x.shape),
           dy = randomFloat(f32, x.shape), dx(f32, x.shape);
    fsdp_rt_softmax(nullptr, f32, x.data(), x.shape.data(), x.rank(), dim,
                    y.data());
    fsdp_rt_softmax_grad(nullptr, f32, y.data(), dy.data(), x.shape.data(),
                         x.rank(), dim, dx.data());
    w.begin(dim == -1 ? "softmax_grad" : "softmax_grad_dim1", "softmax_grad");
    w.attr("dim", dim);
    w.tensor("in", "x", x);
    w.tensor("in", "dy", dy);
    // The backend's own softmax, which the gradient reads: a result, so two
    // backends' runs compare it within the tolerance (not bit for bit).
    w.tensor("out", "y", y);
    w.tensor("out", "dx", dx);
  }

  for (fsdp_rt_dtype dt : {f32, bf16}) {
    // 12 ids over a vocabulary of 7 repeat, so rows accumulate.
    const int64_t vocab = 7, hidden = 6;
    Tensor ids = randomIndex(FSDP_RT_I64, {3, 4}, vocab),
           dy = randomFloat(dt, {3, 4, hidden}), dtable(dt, {vocab, hidden});
    fsdp_rt_embedding_grad(nullptr, dt, FSDP_RT_I64, ids.data(), ids.numel(),
                           dy.data(), vocab, hidden, 0, dtable.data());
    w.begin(dt == f32 ? "embedding_grad" : "embedding_grad_bf16",
            "embedding_grad");
    w.tensor("in", "ids", ids);
    w.tensor("in", "dy", dy);
    w.tensor("out", "dtable", dtable);
  }

  crossEntropyGradCase(w, "cross_entropy_grad_mean", FSDP_RT_REDUCTION_MEAN,
                       "mean", f32);
  crossEntropyGradCase(w, "cross_entropy_grad_sum", FSDP_RT_REDUCTION_SUM,
                       "sum", f32);
  crossEntropyGradCase(w, "cross_entropy_grad_none", FSDP_RT_REDUCTION_NONE,
                       "none", f32);
  crossEntropyGradCase(w, "cross_entropy_grad_bf16", FSDP_RT_REDUCTION_MEAN,
                       "mean", bf16);

  reduceSumToCase(w, "reduce_sum_to", f32, {2, 3, 4, 5}, {3, 1, 5});
  reduceSumToCase(w, "reduce_sum_to_bias", f32, {2, 3, 4}, {4});
  reduceSumToCase(w, "reduce_sum_to_scalar", f32, {3, 5}, {});
  reduceSumToCase(w, "reduce_sum_to_bf16", bf16, {4, 1, 6}, {1, 1, 6});

  for (fsdp_rt_dtype dt : {f32, bf16}) {
    Tensor x = randomFloat(dt, {2, 3, 4}), out(dt, {2, 6, 4});
    fsdp_rt_pad(nullptr, dt, x.data(), x.shape.data(), x.rank(), -2, 1, 2,
                out.data());
    w.begin(dt == f32 ? "pad" : "pad_bf16", "pad");
    w.attr("dim", -2);
    w.attr("before", 1);
    w.attr("after", 2);
    w.tensor("in", "x", x);
    w.tensor("out", "out", out);
  }

  for (fsdp_rt_dtype dt : {f32, bf16}) {
    Tensor x = randomFloat(dt, {1000}, 3.0f), out(FSDP_RT_F32, {});
    fsdp_rt_sum_squares(nullptr, dt, x.data(), x.numel(), out.as<float>());
    w.begin(dt == f32 ? "sum_squares" : "sum_squares_bf16", "sum_squares");
    w.tensor("in", "x", x);
    w.tensor("out", "out", out);
  }

  optimizerCase(w, "adamw", true, 0, f32);
  optimizerCase(w, "adamw_bf16_grad", true, 0, bf16);
  optimizerCase(w, "adamw_multi_bf16_grad", true, 0, bf16, 45);
  optimizerCase(w, "sgd_momentum", false, 0.9, f32);
  optimizerCase(w, "sgd", false, 0, f32);
  // Pieces of the parallel loop (OptimizerMath.h's kSgdPiece), the last
  // one short, and the gradient converted in chunks.
  optimizerCase(w, "sgd_momentum_bf16_grad_pieces", false, 0.9, bf16, 1,
                150001);

  // The flash kernels' shapes, last as above.
  attentionGradCase(w, "attention_grad_flash_bf16", bf16, true, 0, 4, 2, 64,
                    0.125, 2, 100, 64);
  attentionGradCase(w, "attention_grad_flash_window_f16", f16, true, 40, 2, 1,
                    128, 0.0883883, 1, 130, 128);
  attentionGradCase(w, "attention_grad_flash_noncausal_bf16", bf16, false, 20,
                    3, 3, 64, 0.2, 1, 64, 64);
}

/// Checks the memory, stream and counter API; returns false on a mismatch.
bool checkSupport() {
  bool ok = true;
  auto expect = [&](bool cond, const char *what) {
    if (!cond) {
      std::fprintf(stderr, "support check failed: %s\n", what);
      ok = false;
    }
  };
  int64_t base = fsdp_rt_memory_current();
  void *a = fsdp_rt_alloc(1000), *b = fsdp_rt_alloc(24);
  expect(a && b && uintptr_t(a) % 64 == 0 && uintptr_t(b) % 64 == 0,
         "alloc is 64-byte aligned");
  expect(fsdp_rt_memory_current() == base + 1024, "current after alloc");
  fsdp_rt_free(a);
  expect(fsdp_rt_memory_current() == base + 24, "current after free");
  expect(fsdp_rt_memory_peak() >= base + 1024, "peak keeps the maximum");
  fsdp_rt_memory_reset_peak();
  expect(fsdp_rt_memory_peak() == base + 24, "reset peak");
  fsdp_rt_free(b);

  fsdp_rt_stream s = fsdp_rt_stream_create();
  fsdp_rt_event e = fsdp_rt_event_create();
  fsdp_rt_event_record(e, s);
  fsdp_rt_stream_wait_event(nullptr, e);
  fsdp_rt_event_synchronize(e);
  fsdp_rt_stream_synchronize(s);
  fsdp_rt_event_destroy(e);
  fsdp_rt_stream_destroy(s);

  fsdp_rt_counters_reset();
  fsdp_rt_count_collective(FSDP_RT_ALL_GATHER, 1u << 1, 4096);
  fsdp_rt_count_collective(FSDP_RT_ALL_GATHER, 1u << 1, 100);
  fsdp_rt_count_collective(FSDP_RT_REDUCE_SCATTER, (1u << 0) | (1u << 1), 7);
  expect(fsdp_rt_collective_bytes(FSDP_RT_ALL_GATHER, 2) == 4196 &&
             fsdp_rt_collective_calls(FSDP_RT_ALL_GATHER, 2) == 2,
         "all_gather counters");
  expect(fsdp_rt_collective_calls(FSDP_RT_REDUCE_SCATTER, 3) == 1 &&
             fsdp_rt_collective_calls(FSDP_RT_REDUCE_SCATTER, 2) == 0,
         "counters are keyed by the axis set");
  Tensor x(FSDP_RT_F32, {4}), y(FSDP_RT_F32, {4}), sumSq(FSDP_RT_F32, {});
  fsdp_rt_neg(nullptr, FSDP_RT_F32, x.data(), 4, y.data());
  fsdp_rt_sum_squares(nullptr, FSDP_RT_F32, x.data(), 4, sumSq.as<float>());
  hostSync();
  expect(fsdp_rt_kernel_calls(FSDP_RT_KERNEL_ELEMENTWISE) == 1 &&
             fsdp_rt_kernel_time_ns(FSDP_RT_KERNEL_ELEMENTWISE) >= 0 &&
             fsdp_rt_kernel_calls(FSDP_RT_KERNEL_OPTIMIZER) == 1 &&
             fsdp_rt_kernel_calls(FSDP_RT_KERNEL_GEMM) == 0,
         "kernel counters");
  fsdp_rt_counters_reset();
  expect(fsdp_rt_collective_bytes(FSDP_RT_ALL_GATHER, 2) == 0 &&
             fsdp_rt_kernel_calls(FSDP_RT_KERNEL_ELEMENTWISE) == 0,
         "counters reset");
  return ok;
}

} // namespace

int main(int argc, char **argv) {
  bool grad = argc == 3 && std::strcmp(argv[1], "--grad") == 0;
  if (argc != 2 && !grad) {
    std::fprintf(stderr, "usage: %s [--grad] <output-dir>\n", argv[0]);
    return 2;
  }
  const char *dir = argv[argc - 1];
  mkdir(dir, 0755);
  Writer w(dir);
  if (!w.ok()) {
    std::fprintf(stderr, "cannot write to %s\n", dir);
    return 1;
  }
  if (!checkSupport())
    return 1;
  if (grad)
    runGrad(w);
  else
    runAll(w);
  return 0;
}
