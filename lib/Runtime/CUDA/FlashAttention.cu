//===- FlashAttention.cu - The flash kernels behind the ABI ---------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// Launches FlashAttention.cuh's kernels on the call's stream: temporaries
// (Δ and the f32 dQ accumulator) from the runtime's pool, shared memory
// above 48 KiB allowed per kernel where the head dim needs it.
//
//===----------------------------------------------------------------------===//

#include "AttentionGemm.cuh"
#include "FlashAttention.cuh"

#include <type_traits>
#include <vector>

using namespace fsdp::rt::cuda;

namespace {

/// FlashAttention.cuh's launcher on a CUDA stream.
class Launcher {
public:
  explicit Launcher(const KernelScope &scope) : scope(scope) {}
  ~Launcher() {
    for (void *p : temps)
      freeTemp(p, scope.stream());
  }
  Launcher(const Launcher &) = delete;
  Launcher &operator=(const Launcher &) = delete;

  template <typename... Params, typename... Args>
  void launch(void (*kernel)(Params...), unsigned gx, unsigned gy, unsigned gz,
              int threads, size_t shared, Args... args) {
    if (shared > 48 * 1024)
      check(cudaFuncSetAttribute(kernel,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 int(shared)),
            scope.name());
    kernel<<<dim3(gx, gy, gz), threads, shared, scope.stream()>>>(args...);
  }
  float *temp(int64_t n) {
    temps.push_back(allocTemp(size_t(n > 0 ? n : 1) * sizeof(float),
                              scope.stream(), scope.name()));
    return static_cast<float *>(temps.back());
  }
  void zero(float *p, int64_t n) {
    check(cudaMemsetAsync(p, 0, size_t(n) * sizeof(float), scope.stream()),
          scope.name());
  }

private:
  const KernelScope &scope;
  std::vector<void *> temps;
};

/// Calls fn(element type, head dim) when the flash kernels apply.
template <typename Fn>
bool dispatch(const KernelScope &scope, fsdp_rt_dtype dtype,
              const AttentionShape &a, std::initializer_list<const void *> ptrs,
              Fn &&fn) {
  if ((dtype != FSDP_RT_BF16 && dtype != FSDP_RT_F16) ||
      !flash::supports(a.d, a.dv, ptrs))
    return false;
  if (a.nq > 65535 || a.nkv > 65535 || a.b > 65535)
    fail(scope.name(), "more than 65535 heads or batches");
  auto withDim = [&](auto e) {
    if (a.d == 32)
      fn(e, std::integral_constant<int, 32>());
    else if (a.d == 64)
      fn(e, std::integral_constant<int, 64>());
    else
      fn(e, std::integral_constant<int, 128>());
  };
  if (dtype == FSDP_RT_BF16)
    withDim(flash::BF16());
  else
    withDim(flash::F16());
  return true;
}

flash::Params paramsOf(const AttentionShape &a) {
  return flash::makeParams(a.b, a.s, a.skv ? a.skv : a.s, a.nq, a.nkv, a.qpos,
                           a.kpos, a.dpos, a.causal, a.window, a.scale);
}

template <typename E> const typename E::T *in(const void *p) {
  return static_cast<const typename E::T *>(p);
}
template <typename E> typename E::T *out(void *p) {
  return static_cast<typename E::T *>(p);
}

} // namespace

bool fsdp::rt::cuda::flashAttention(const KernelScope &scope,
                                    fsdp_rt_dtype dtype, const void *q,
                                    const void *k, const void *v,
                                    const AttentionShape &a, void *o,
                                    float *lse) {
  return dispatch(scope, dtype, a, {q, k, v, o}, [&](auto e, auto dim) {
    using E = decltype(e);
    Launcher launcher(scope);
    flash::forward<E, decltype(dim)::value>(
        launcher, flash::ForwardArgs<E>{in<E>(q), in<E>(k), in<E>(v),
                                        paramsOf(a), out<E>(o), lse});
  });
}

bool fsdp::rt::cuda::flashAttentionGrad(
    const KernelScope &scope, fsdp_rt_dtype dtype, const void *q, const void *k,
    const void *v, const void *o, const float *lse, const void *dout,
    const float *dlse, const AttentionShape &a, void *dq, void *dk,
    void *dvalue) {
  return dispatch(scope, dtype, a, {q, k, v, o, dout, dq, dk, dvalue},
                  [&](auto e, auto dim) {
                    using E = decltype(e);
                    Launcher launcher(scope);
                    flash::backward<E, decltype(dim)::value>(
                        launcher,
                        flash::BackwardArgs<E>{in<E>(q), in<E>(k), in<E>(v),
                                               in<E>(dout), lse, nullptr,
                                               paramsOf(a), nullptr, out<E>(dk),
                                               out<E>(dvalue)},
                        in<E>(o), dlse, out<E>(dq));
                  });
}
