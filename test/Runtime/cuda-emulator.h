//===- cuda-emulator.h - CUDA threads on the CPU -------------*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// Runs kernels written against Portable.cuh's primitives on the CPU,
// so that CI tests them without a GPU: each CUDA thread of a block is a
// std::thread, __syncthreads is a barrier of the block, and the warp-wide
// operations (shuffles, mma.sync) exchange the lanes' registers through a
// per-warp buffer between two barriers of the warp. mma.sync.m16n8k16 is
// rebuilt from the fragment layouts of the PTX ISA (A: lane 4g + t holds
// rows g, g + 8 and columns 2t, 2t + 1, 2t + 8, 2t + 9; B: column g, rows
// 2t, 2t + 1, 2t + 8, 2t + 9; C: rows g, g + 8, columns 2t, 2t + 1), which
// is what the kernels' register shuffling assumes. Blocks run one after
// another; shared memory starts as 0xff bytes (NaN in bf16/f16/f32) so that
// a read of something never written shows.
//
// Include this before Portable.cuh, with FSDP_CUDA_EMULATE defined.
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_TEST_RUNTIME_CUDA_EMULATOR_H
#define FSDP_TEST_RUNTIME_CUDA_EMULATOR_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <atomic>
#include <barrier>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

namespace emu {

struct Dim {
  unsigned x = 0, y = 0, z = 0;
};

/// What the threads of one block share.
struct Block {
  Block(int threads, size_t sharedBytes)
      : all(threads), shared(sharedBytes, 0xff), exchange(threads / 32) {
    for (int w = 0; w < threads / 32; ++w)
      warps.push_back(std::make_unique<std::barrier<>>(32));
  }
  std::barrier<> all;
  std::vector<std::unique_ptr<std::barrier<>>> warps;
  std::vector<unsigned char> shared;
  /// Per warp, six words per lane: a shuffle's value or an mma's operands.
  struct Words {
    uint32_t w[32][6];
  };
  std::vector<Words> exchange;
};

struct Thread {
  Dim threadIdx, blockIdx, blockDim, gridDim;
  Block *block = nullptr;
};
inline thread_local Thread self;

inline char *sharedMemory() {
  return reinterpret_cast<char *>(self.block->shared.data());
}
inline void syncThreads() { self.block->all.arrive_and_wait(); }
inline void syncWarp() {
  self.block->warps[self.threadIdx.x / 32]->arrive_and_wait();
}
inline Block::Words &warpWords() {
  return self.block->exchange[self.threadIdx.x / 32];
}

template <typename T> T shflXor(T v, int mask) {
  static_assert(sizeof(T) <= sizeof(Block::Words::w[0]));
  Block::Words &ex = warpWords();
  unsigned lane = self.threadIdx.x % 32;
  memcpy(&ex.w[lane][0], &v, sizeof(T));
  syncWarp();
  T r;
  memcpy(&r, &ex.w[lane ^ unsigned(mask)][0], sizeof(T));
  syncWarp();
  return r;
}

inline void atomicAdd(float *p, float v) {
  std::atomic_ref<float>(*p).fetch_add(v);
}

/// Half `hi` of a fragment word as a float.
inline float element(uint32_t word, int hi, bool half) {
  uint16_t bits = uint16_t(hi ? word >> 16 : word & 0xffff);
  if (half) {
    __half_raw raw;
    raw.x = bits;
    return __half2float(__half(raw));
  }
  uint32_t f = uint32_t(bits) << 16;
  float x;
  memcpy(&x, &f, 4);
  return x;
}

/// D = A·B + C for the warp, m16n8k16, f32 accumulation.
inline void mma16816(bool half, float (&c)[4], const uint32_t (&a)[4],
                     const uint32_t (&b)[2]) {
  Block::Words &ex = warpWords();
  unsigned lane = self.threadIdx.x % 32;
  for (int i = 0; i < 4; ++i)
    ex.w[lane][i] = a[i];
  ex.w[lane][4] = b[0];
  ex.w[lane][5] = b[1];
  syncWarp();
  auto at = [&](int r, int k) {
    return element(ex.w[(r % 8) * 4 + (k % 8) / 2][(r >= 8) + 2 * (k >= 8)],
                   k % 2, half);
  };
  auto bt = [&](int k, int n) {
    return element(ex.w[n * 4 + (k % 8) / 2][4 + (k >= 8)], k % 2, half);
  };
  int g = int(lane / 4), t = int(lane % 4);
  float d[4];
  for (int i = 0; i < 4; ++i) {
    int r = g + 8 * (i / 2), n = 2 * t + i % 2;
    float sum = 0.0f;
    for (int k = 0; k < 16; ++k)
      sum += at(r, k) * bt(k, n);
    d[i] = c[i] + sum;
  }
  syncWarp();
  for (int i = 0; i < 4; ++i)
    c[i] = d[i];
}

/// Runs `body` as every thread of every block of the grid.
template <typename Fn>
void launch(unsigned gx, unsigned gy, unsigned gz, int threads,
            size_t sharedBytes, Fn body) {
  for (unsigned z = 0; z < gz; ++z)
    for (unsigned y = 0; y < gy; ++y)
      for (unsigned x = 0; x < gx; ++x) {
        Block block(threads, sharedBytes);
        std::vector<std::thread> pool;
        for (int i = 0; i < threads; ++i)
          pool.emplace_back([&, i] {
            self = {{unsigned(i), 0, 0},
                    {x, y, z},
                    {unsigned(threads), 1, 1},
                    {gx, gy, gz},
                    &block};
            body();
            // A thread that is done no longer holds up the others.
            block.all.arrive_and_drop();
            block.warps[i / 32]->arrive_and_drop();
          });
        for (std::thread &th : pool)
          th.join();
      }
}

} // namespace emu

#define threadIdx (::emu::self.threadIdx)
#define blockIdx (::emu::self.blockIdx)
#define blockDim (::emu::self.blockDim)
#define gridDim (::emu::self.gridDim)

#endif // FSDP_TEST_RUNTIME_CUDA_EMULATOR_H
