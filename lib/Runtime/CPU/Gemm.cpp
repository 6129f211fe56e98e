//===- Gemm.cpp - The runtime's one matrix product, through oneDNN --------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// f32 products go to oneDNN's sgemm; bf16 (and f16 where the CPU has it)
// products run as a oneDNN matmul primitive on the 16-bit operands as they
// are stored, accumulating in f32 and rounding the result once, so no
// operand is widened into a copy. oneDNN picks its kernels for the CPU it
// runs on (AVX-512 BF16 here, AVX2 elsewhere) at run time, so the shipped
// library stays portable. Primitives are created once per shape and kept.
// A 16-bit product oneDNN cannot run on this CPU falls back to widening
// and sgemm, which gives the same f32-accumulated result.
//
//===----------------------------------------------------------------------===//

#include "../Common/Dtype.h"
#include "Internal.h"

#include <dnnl.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

using namespace fsdp::rt;

namespace {

void check(dnnl_status_t status, const char *what) {
  if (status == dnnl_success)
    return;
  std::fprintf(stderr, "fsdp runtime error: oneDNN %s failed (status %d)\n",
               what, int(status));
  std::abort();
}

dnnl_data_type_t dnnlType(fsdp_rt_dtype dtype) {
  static constexpr DtypeTable<dnnl_data_type_t> names{
      dnnl_f32, dnnl_bf16, dnnl_f16, dnnl_f32, dnnl_f32};
  return names[dtype];
}

/// What a matmul primitive is specialized to.
using Shape = std::tuple<int, bool, bool, bool, int64_t, int64_t, int64_t,
                         int64_t, int64_t, int64_t>;

/// A matmul primitive and its memory objects, whose data handles are set at
/// each call; null when oneDNN has no kernel for the shape on this CPU.
struct Matmul {
  dnnl_primitive_t primitive = nullptr;
  dnnl_memory_t src = nullptr, weights = nullptr, bias = nullptr, dst = nullptr;
};

#ifdef FSDP_MAX_CPU_ISA_AVX2
// oneDNN's kernels stay within AVX2 too. Its limit holds only when set
// before oneDNN generates any kernel, so at load time.
[[maybe_unused]] const bool kIsaLimited = [] {
  check(dnnl_set_max_cpu_isa(dnnl_cpu_isa_avx2), "max cpu isa");
  return true;
}();
#endif

class Engine {
public:
  static Engine &get() {
    static Engine engine;
    return engine;
  }

  /// The primitive for `shape`, created on first use.
  const Matmul &matmul(const Shape &shape) {
    std::lock_guard<std::mutex> lock(mutex);
    auto [it, inserted] = cache.try_emplace(shape);
    if (inserted)
      it->second = create(shape);
    return it->second;
  }

  void run(const Matmul &mm, const void *a, const void *b, const void *bias,
           void *c) {
    std::lock_guard<std::mutex> lock(mutex);
    check(dnnl_memory_set_data_handle(mm.src, const_cast<void *>(a)), "src");
    check(dnnl_memory_set_data_handle(mm.weights, const_cast<void *>(b)),
          "weights");
    check(dnnl_memory_set_data_handle(mm.dst, c), "dst");
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, mm.src},
                               {DNNL_ARG_WEIGHTS, mm.weights},
                               {DNNL_ARG_DST, mm.dst},
                               {DNNL_ARG_BIAS, mm.bias}};
    int nargs = 3;
    if (mm.bias) {
      check(dnnl_memory_set_data_handle(mm.bias, const_cast<void *>(bias)),
            "bias");
      nargs = 4;
    }
    check(dnnl_primitive_execute(mm.primitive, stream, nargs, args), "matmul");
    check(dnnl_stream_wait(stream), "stream wait");
  }

private:
  Engine() {
    check(dnnl_engine_create(&engine, dnnl_cpu, 0), "engine");
    check(dnnl_stream_create(&stream, engine, dnnl_stream_default_flags),
          "stream");
  }

  Matmul create(const Shape &shape) {
    auto [dtype, transA, transB, hasBias, m, n, k, lda, ldb, ldc] = shape;
    dnnl_data_type_t type = dnnlType(fsdp_rt_dtype(dtype));
    dnnl_memory_desc_t src, weights, bias, dst;
    dnnl_dims_t srcDims = {m, k}, weightDims = {k, n}, dstDims = {m, n},
                biasDims = {1, n};
    dnnl_dims_t srcStrides = {transA ? 1 : lda, transA ? lda : 1};
    dnnl_dims_t weightStrides = {transB ? 1 : ldb, transB ? ldb : 1};
    dnnl_dims_t dstStrides = {ldc, 1}, biasStrides = {n, 1};
    check(dnnl_memory_desc_init_by_strides(&src, 2, srcDims, type, srcStrides),
          "src desc");
    check(dnnl_memory_desc_init_by_strides(&weights, 2, weightDims, type,
                                           weightStrides),
          "weights desc");
    check(dnnl_memory_desc_init_by_strides(&dst, 2, dstDims, type, dstStrides),
          "dst desc");
    check(
        dnnl_memory_desc_init_by_strides(&bias, 2, biasDims, type, biasStrides),
        "bias desc");
    dnnl_matmul_desc_t desc;
    check(dnnl_matmul_desc_init(&desc, &src, &weights,
                                hasBias ? &bias : nullptr, &dst),
          "matmul desc");
    Matmul mm;
    dnnl_primitive_desc_t pd;
    if (dnnl_primitive_desc_create(&pd, &desc, nullptr, engine, nullptr) !=
        dnnl_success)
      return mm;
    check(dnnl_primitive_create(&mm.primitive, pd), "primitive");
    check(dnnl_primitive_desc_destroy(pd), "primitive desc");
    check(dnnl_memory_create(&mm.src, &src, engine, DNNL_MEMORY_NONE), "mem");
    check(dnnl_memory_create(&mm.weights, &weights, engine, DNNL_MEMORY_NONE),
          "mem");
    check(dnnl_memory_create(&mm.dst, &dst, engine, DNNL_MEMORY_NONE), "mem");
    if (hasBias)
      check(dnnl_memory_create(&mm.bias, &bias, engine, DNNL_MEMORY_NONE),
            "mem");
    return mm;
  }

  dnnl_engine_t engine;
  dnnl_stream_t stream;
  std::mutex mutex;
  std::map<Shape, Matmul> cache;
};

} // namespace

void fsdp::rt::sgemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
                     float alpha, const float *a, int64_t lda, const float *b,
                     int64_t ldb, const float *bias, float beta, float *c,
                     int64_t ldc) {
  if (m == 0 || n == 0)
    return;
  if (bias) {
    for (int64_t r = 0; r < m; ++r)
      std::memcpy(c + r * ldc, bias, n * sizeof(float));
    beta = 1.0f;
  }
  check(dnnl_sgemm(transA ? 'T' : 'N', transB ? 'T' : 'N', m, n, k, alpha, a,
                   lda, b, ldb, beta, c, ldc),
        "sgemm");
}

void fsdp::rt::gemm(fsdp_rt_dtype dtype, bool transA, bool transB, int64_t m,
                    int64_t n, int64_t k, const void *a, int64_t lda,
                    const void *b, int64_t ldb, const void *bias, float beta,
                    void *c, int64_t ldc) {
  if (m == 0 || n == 0)
    return;
  if (dtype == FSDP_RT_F32) {
    sgemm(transA, transB, m, n, k, 1.0f, static_cast<const float *>(a), lda,
          static_cast<const float *>(b), ldb, static_cast<const float *>(bias),
          beta, static_cast<float *>(c), ldc);
    return;
  }
  Engine &engine = Engine::get();
  if (beta == 0.0f && k > 0) {
    const Matmul &mm = engine.matmul(
        Shape(dtype, transA, transB, bias, m, n, k, lda, ldb, ldc));
    if (mm.primitive) {
      engine.run(mm, a, b, bias, c);
      return;
    }
  }
  // Widen the operands, multiply in f32, round once.
  auto extent = [](int64_t rows, int64_t cols, int64_t ld) {
    return rows == 0 ? 0 : (rows - 1) * ld + cols;
  };
  FloatInput fa(dtype, a, transA ? extent(k, m, lda) : extent(m, k, lda)),
      fb(dtype, b, transB ? extent(n, k, ldb) : extent(k, n, ldb)),
      fbias(dtype, bias, n);
  std::vector<float> out(m * n);
  if (beta != 0.0f)
    for (int64_t r = 0; r < m; ++r)
      toFloat(dtype, static_cast<const uint16_t *>(c) + r * ldc, n,
              out.data() + r * n);
  sgemm(transA, transB, m, n, k, 1.0f, fa.get(), lda, fb.get(), ldb,
        fbias.get(), beta, out.data(), n);
  for (int64_t r = 0; r < m; ++r)
    fromFloat(dtype, out.data() + r * n, n,
              static_cast<uint16_t *>(c) + r * ldc);
}

const char *fsdp_rt_kernel_isa(void) {
  static const std::string isa = [] {
    dnnl_cpu_isa_t gemm = dnnl_get_effective_cpu_isa();
    const char *name = nullptr;
    switch (gemm) {
    case dnnl_cpu_isa_sse41:
      name = "sse41";
      break;
    case dnnl_cpu_isa_avx:
      name = "avx";
      break;
    case dnnl_cpu_isa_avx2:
      name = "avx2";
      break;
    case dnnl_cpu_isa_avx2_vnni:
      name = "avx2_vnni";
      break;
    case dnnl_cpu_isa_avx512_core:
      name = "avx512_core";
      break;
    case dnnl_cpu_isa_avx512_core_vnni:
      name = "avx512_core_vnni";
      break;
    case dnnl_cpu_isa_avx512_core_bf16:
      name = "avx512_core_bf16";
      break;
    case dnnl_cpu_isa_avx512_core_amx:
      name = "avx512_core_amx";
      break;
    default:
      break;
    }
    return std::string(vectorLevel()) + " loops, oneDNN " +
           (name ? name : "isa " + std::to_string(int(gemm)));
  }();
  return isa.c_str();
}
