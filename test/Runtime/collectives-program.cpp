//===- collectives-program.cpp - Every collective on every group ----------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// A hand-written program, using Program.h as generated code does, on a mesh
// `a` x `b` whose sizes come from FSDP_TEST_MESH (e.g. "2x3"). The step runs
// each collective, synchronous and asynchronous, over the groups {a}, {b} and
// {a,b}, on inputs that depend on the rank, and compares every element with
// the result computed locally from the definition. Rank 0 prints
// `collective <case> group <g> <sync|async> ok`; a mismatch prints the
// element and exits 1, which makes mpirun fail. At the end the collective
// counters are compared with the documented byte convention.
//
//===----------------------------------------------------------------------===//

#include "fsdp/Runtime/Program.h"
#include "fsdp/Runtime/Runtime.h"

#include "Common/Float.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace {

int64_t meshA = 2, meshB = 2;

/// Element i of rank r's input; small integers, exact in bf16 even summed.
double valueOf(int64_t rank, int64_t i) {
  return double((rank * 5 + i * 3) % 29) - 7;
}

int64_t numel(const fsdp_type &t) {
  int64_t n = 1;
  for (int64_t i = 0; i < t.rank; ++i)
    n *= t.dims[i];
  return n;
}

std::vector<int64_t> unflatten(const fsdp_type &t, int64_t flat) {
  std::vector<int64_t> idx(t.rank);
  for (int64_t d = t.rank - 1; d >= 0; --d) {
    idx[d] = flat % t.dims[d];
    flat /= t.dims[d];
  }
  return idx;
}

int64_t flatten(const fsdp_type &t, const std::vector<int64_t> &idx) {
  int64_t flat = 0;
  for (int64_t d = 0; d < t.rank; ++d)
    flat = flat * t.dims[d] + idx[d];
  return flat;
}

bool isFloat(fsdp_rt_dtype d) {
  return d == FSDP_RT_F32 || d == FSDP_RT_BF16 || d == FSDP_RT_F16;
}

// Tensors are read and written through copies, so that the program runs on
// any backend (device buffers on CUDA).
std::vector<double> read(fsdp_tensor *t, const fsdp_type &type) {
  int64_t n = numel(type);
  std::vector<double> out(n);
  std::vector<char> bytes(size_t(n) * fsdp_rt_dtype_size(type.dtype));
  fsdp_rt_copy_to_host(nullptr, bytes.data(), fsdp_tensor_data(t),
                       bytes.size());
  fsdp_rt_stream_synchronize(nullptr);
  if (isFloat(type.dtype)) {
    std::vector<float> f(n);
    fsdp::rt::toFloat(type.dtype, bytes.data(), n, f.data());
    for (int64_t i = 0; i < n; ++i)
      out[i] = f[i];
  } else {
    for (int64_t i = 0; i < n; ++i)
      out[i] = type.dtype == FSDP_RT_I32
                   ? double(reinterpret_cast<int32_t *>(bytes.data())[i])
                   : double(reinterpret_cast<int64_t *>(bytes.data())[i]);
  }
  return out;
}

/// This rank's view of one group: its size, its index, the members' ranks.
struct GroupView {
  uint32_t mask;
  const char *name;
  int64_t size = 1, index = 0;
  std::vector<int64_t> members; // global rank of each member
};

GroupView viewOf(fsdp_program *p, uint32_t mask, const char *name) {
  int64_t sizes[2] = {meshA, meshB};
  int64_t coords[2] = {fsdp_prog_mesh_coord(p, 0), fsdp_prog_mesh_coord(p, 1)};
  GroupView g{mask, name};
  for (int a = 0; a < 2; ++a)
    if (mask & (1u << a)) {
      g.size *= sizes[a];
      g.index = g.index * sizes[a] + coords[a];
    }
  for (int64_t j = 0; j < g.size; ++j) {
    int64_t c[2] = {coords[0], coords[1]}, rest = j;
    for (int a = 1; a >= 0; --a)
      if (mask & (1u << a)) {
        c[a] = rest % sizes[a];
        rest /= sizes[a];
      }
    g.members.push_back(c[0] * meshB + c[1]);
  }
  return g;
}

struct Tester {
  fsdp_program *p;
  int64_t rank;
  /// Expected counter values by (kind, mask).
  int64_t bytes[FSDP_RT_NUM_COLLECTIVE_KINDS][4] = {};
  int64_t calls[FSDP_RT_NUM_COLLECTIVE_KINDS][4] = {};

  fsdp_tensor *input(const fsdp_type &t) {
    fsdp_tensor *x = fsdp_tensor_new(p, t);
    int64_t n = numel(t);
    std::vector<float> f(n);
    for (int64_t i = 0; i < n; ++i)
      f[i] = float(valueOf(rank, i));
    std::vector<char> bytes(size_t(n) * fsdp_rt_dtype_size(t.dtype));
    void *data = bytes.data();
    for (int64_t i = 0; i < n; ++i) {
      if (t.dtype == FSDP_RT_I32)
        static_cast<int32_t *>(data)[i] = int32_t(f[i]);
      else if (t.dtype == FSDP_RT_I64)
        static_cast<int64_t *>(data)[i] = int64_t(f[i]);
    }
    if (isFloat(t.dtype))
      fsdp::rt::fromFloat(t.dtype, f.data(), n, data);
    fsdp_rt_copy_to_device(nullptr, fsdp_tensor_data(x), data, bytes.size());
    fsdp_rt_stream_synchronize(nullptr);
    return x;
  }

  void count(fsdp_rt_collective_kind kind, const GroupView &g, int64_t b) {
    bytes[kind][g.mask] += b;
    calls[kind][g.mask] += 1;
  }

  /// Runs `run` (sync, then async) and compares with `expect(flat index)`.
  void check(const std::string &name, const GroupView &g, const fsdp_type &in,
             const fsdp_type &r,
             const std::function<fsdp_tensor *(fsdp_tensor *)> &sync,
             const std::function<fsdp_future *(fsdp_tensor *)> &async,
             const std::function<double(int64_t)> &expect) {
    for (int mode = 0; mode < 2; ++mode) {
      fsdp_tensor *x = input(in);
      fsdp_tensor *y;
      if (mode == 0) {
        y = sync(x);
        fsdp_release(x);
      } else {
        // The program may drop its reference before the wait.
        fsdp_future *f = async(x);
        fsdp_release(x);
        y = fsdp_wait(p, f);
      }
      std::vector<double> got = read(y, r);
      fsdp_release(y);
      double tol = r.dtype == FSDP_RT_F32 ? 1e-5 : isFloat(r.dtype) ? 1e-2 : 0;
      for (size_t i = 0; i < got.size(); ++i) {
        double want = expect(int64_t(i));
        if (std::fabs(got[i] - want) > tol * std::max(1.0, std::fabs(want))) {
          std::fprintf(stderr,
                       "collective %s group %s %s FAILED on rank %lld: "
                       "element %zu is %g, expected %g\n",
                       name.c_str(), g.name, mode ? "async" : "sync",
                       (long long)rank, i, got[i], want);
          std::exit(1);
        }
      }
      if (rank == 0)
        std::printf("collective %s group %s %s ok\n", name.c_str(), g.name,
                    mode ? "async" : "sync");
    }
  }

  double reduce(const GroupView &g, fsdp_reduction red, int64_t i,
                bool integer) {
    double acc = red == FSDP_REDUCE_MAX ? -1e300 : 0;
    for (int64_t m : g.members)
      acc = red == FSDP_REDUCE_MAX ? std::max(acc, valueOf(m, i))
                                   : acc + valueOf(m, i);
    if (red == FSDP_REDUCE_AVG)
      acc = integer ? double(int64_t(acc) / g.size) : acc / double(g.size);
    return acc;
  }

  void allGather(const GroupView &g, fsdp_type in, int64_t dim) {
    fsdp_type r = in;
    r.dims[dim] *= g.size;
    std::string name = "all_gather_dim" + std::to_string(dim) + "_" +
                       (in.dtype == FSDP_RT_F32 ? "f32" : "i64");
    for (int i = 0; i < 2; ++i)
      count(FSDP_RT_ALL_GATHER, g,
            numel(in) * int64_t(fsdp_rt_dtype_size(in.dtype)) * (g.size - 1));
    check(
        name, g, in, r,
        [&](fsdp_tensor *x) {
          return fsdp_op_all_gather(p, r, x, g.mask, dim);
        },
        [&](fsdp_tensor *x) {
          return fsdp_op_all_gather_start(p, r, x, g.mask, dim);
        },
        [&](int64_t flat) {
          std::vector<int64_t> idx = unflatten(r, flat);
          int64_t j = idx[dim] / in.dims[dim];
          idx[dim] %= in.dims[dim];
          return valueOf(g.members[j], flatten(in, idx));
        });
  }

  void reduceScatter(const GroupView &g, fsdp_type r, int64_t dim,
                     fsdp_reduction red) {
    fsdp_type in = r;
    in.dims[dim] *= g.size;
    static const char *reds[] = {"sum", "avg", "max"};
    std::string name = std::string("reduce_scatter_") + reds[red] + "_dim" +
                       std::to_string(dim) + "_" +
                       (r.dtype == FSDP_RT_F32 ? "f32" : "bf16");
    for (int i = 0; i < 2; ++i)
      count(FSDP_RT_REDUCE_SCATTER, g,
            numel(in) * int64_t(fsdp_rt_dtype_size(in.dtype)) * (g.size - 1) /
                g.size);
    check(
        name, g, in, r,
        [&](fsdp_tensor *x) {
          return fsdp_op_reduce_scatter(p, r, x, g.mask, red, dim);
        },
        [&](fsdp_tensor *x) {
          return fsdp_op_reduce_scatter_start(p, r, x, g.mask, red, dim);
        },
        [&](int64_t flat) {
          std::vector<int64_t> idx = unflatten(r, flat);
          idx[dim] += g.index * r.dims[dim];
          return reduce(g, red, flatten(in, idx), false);
        });
  }

  void allReduce(const GroupView &g, fsdp_type t, fsdp_reduction red) {
    static const char *reds[] = {"sum", "avg", "max"};
    static const char *types[] = {"f32", "bf16", "f16", "i32", "i64"};
    std::string name =
        std::string("all_reduce_") + reds[red] + "_" + types[t.dtype];
    for (int i = 0; i < 2; ++i)
      count(FSDP_RT_ALL_REDUCE, g,
            2 * numel(t) * int64_t(fsdp_rt_dtype_size(t.dtype)) * (g.size - 1) /
                g.size);
    check(
        name, g, t, t,
        [&](fsdp_tensor *x) {
          return fsdp_op_all_reduce(p, t, x, g.mask, red);
        },
        [&](fsdp_tensor *x) {
          return fsdp_op_all_reduce_start(p, t, x, g.mask, red);
        },
        [&](int64_t i) { return reduce(g, red, i, !isFloat(t.dtype)); });
  }

  void allToAll(const GroupView &g, fsdp_type block, int64_t split,
                int64_t concat) {
    fsdp_type in = block, r = block;
    in.dims[split] *= g.size;
    r.dims[concat] *= g.size;
    std::string name = "all_to_all_split" + std::to_string(split) + "_concat" +
                       std::to_string(concat);
    for (int i = 0; i < 2; ++i)
      count(FSDP_RT_ALL_TO_ALL, g,
            numel(in) * int64_t(fsdp_rt_dtype_size(in.dtype)) * (g.size - 1) /
                g.size);
    check(
        name, g, in, r,
        [&](fsdp_tensor *x) {
          return fsdp_op_all_to_all(p, r, x, g.mask, split, concat);
        },
        [&](fsdp_tensor *x) {
          return fsdp_op_all_to_all_start(p, r, x, g.mask, split, concat);
        },
        [&](int64_t flat) {
          // Member j sent its block number `index`, joined at j along concat.
          std::vector<int64_t> idx = unflatten(r, flat);
          int64_t j = idx[concat] / block.dims[concat];
          idx[concat] %= block.dims[concat];
          idx[split] += g.index * block.dims[split];
          return valueOf(g.members[j], flatten(in, idx));
        });
  }

  void permute(const GroupView &g, fsdp_type t, int64_t offset) {
    std::string name = "permute_offset" + std::to_string(offset);
    for (int i = 0; i < 2; ++i)
      count(FSDP_RT_PERMUTE, g,
            numel(t) * int64_t(fsdp_rt_dtype_size(t.dtype)));
    int64_t from = ((g.index - offset) % g.size + g.size) % g.size;
    check(
        name, g, t, t,
        [&](fsdp_tensor *x) {
          return fsdp_op_permute(p, t, x, g.mask, offset);
        },
        [&](fsdp_tensor *x) {
          return fsdp_op_permute_start(p, t, x, g.mask, offset);
        },
        [&](int64_t i) { return valueOf(g.members[from], i); });
  }

  /// An i64 tensor holding `values`.
  fsdp_tensor *int64s(const std::vector<int64_t> &values) {
    fsdp_tensor *t =
        fsdp_tensor_new(p, fsdp_type{FSDP_RT_I64, 1, {int64_t(values.size())}});
    fsdp_rt_copy_to_device(nullptr, fsdp_tensor_data(t), values.data(),
                           values.size() * sizeof(int64_t));
    fsdp_rt_stream_synchronize(nullptr);
    return t;
  }

  /// all_to_all_v of rows of `row` (its dim 0 is 1) over `g`: member s
  /// sends member d (s + 2d + shift) % 3 rows (0, 1 or 2: uneven, and zero
  /// for some pairs), out of 2n + 1; the result has 2n + 2 rows, the last
  /// ones zero.
  void allToAllV(const GroupView &g, fsdp_type row, int64_t shift) {
    int64_t n = g.size;
    auto rows = [&](int64_t s, int64_t d) { return (s + 2 * d + shift) % 3; };
    fsdp_type in = row, r = row;
    in.dims[0] = 2 * n + 1;
    r.dims[0] = 2 * n + 2;
    std::vector<int64_t> send(n), recv(n);
    int64_t sentToOthers = 0,
            rowBytes = numel(row) * int64_t(fsdp_rt_dtype_size(row.dtype));
    for (int64_t j = 0; j < n; ++j) {
      send[j] = rows(g.index, j);
      recv[j] = rows(j, g.index);
      if (j != g.index)
        sentToOthers += send[j] * rowBytes;
    }
    for (int i = 0; i < 2; ++i)
      count(FSDP_RT_ALL_TO_ALL_V, g, sentToOthers);
    static const char *types[] = {"f32", "bf16", "f16", "i32", "i64"};
    std::string name =
        "all_to_all_v_shift" + std::to_string(shift) + "_" + types[row.dtype];
    // The counts are released before the wait: the collective holds them.
    auto withCounts = [&](auto call) {
      fsdp_tensor *s = int64s(send), *v = int64s(recv);
      auto out = call(s, v);
      fsdp_release(s);
      fsdp_release(v);
      return out;
    };
    int64_t width = numel(row);
    check(
        name, g, in, r,
        [&](fsdp_tensor *x) {
          return withCounts([&](fsdp_tensor *s, fsdp_tensor *v) {
            return fsdp_op_all_to_all_v(p, r, x, s, v, g.mask);
          });
        },
        [&](fsdp_tensor *x) {
          return withCounts([&](fsdp_tensor *s, fsdp_tensor *v) {
            return fsdp_op_all_to_all_v_start(p, r, x, s, v, g.mask);
          });
        },
        [&](int64_t flat) {
          // Row `at` of the result: row k of what member j sent, which
          // starts at the rows member j sent members 0..index-1.
          int64_t at = flat / width, col = flat % width;
          for (int64_t j = 0; j < n; ++j) {
            if (at < recv[j]) {
              int64_t first = 0;
              for (int64_t d = 0; d < g.index; ++d)
                first += rows(j, d);
              return valueOf(g.members[j], (first + at) * width + col);
            }
            at -= recv[j];
          }
          return 0.0;
        });
  }

  void broadcast(const GroupView &g, fsdp_type t, int64_t root) {
    std::string name = "broadcast_root" + std::to_string(root);
    for (int i = 0; i < 2; ++i)
      count(FSDP_RT_BROADCAST, g,
            numel(t) * int64_t(fsdp_rt_dtype_size(t.dtype)));
    check(
        name, g, t, t,
        [&](fsdp_tensor *x) {
          return fsdp_op_broadcast(p, t, x, g.mask, root);
        },
        [&](fsdp_tensor *x) {
          return fsdp_op_broadcast_start(p, t, x, g.mask, root);
        },
        [&](int64_t i) { return valueOf(g.members[root], i); });
  }
};

} // namespace

void fsdp_program_describe(fsdp_program *p) {
  if (const char *mesh = std::getenv("FSDP_TEST_MESH"))
    std::sscanf(mesh, "%ldx%ld", &meshA, &meshB);
  fsdp_prog_mesh_axis(p, "a", meshA);
  fsdp_prog_mesh_axis(p, "b", meshB);
  fsdp_prog_group(p, 1);
  fsdp_prog_group(p, 2);
  fsdp_prog_group(p, 3);
}

void fsdp_program_forward(fsdp_program *p) {
  Tester t{p, fsdp_prog_mesh_coord(p, 0) * meshB + fsdp_prog_mesh_coord(p, 1)};
  const fsdp_rt_dtype F32 = FSDP_RT_F32, BF16 = FSDP_RT_BF16, I32 = FSDP_RT_I32,
                      I64 = FSDP_RT_I64;
  GroupView groups[] = {viewOf(p, 1, "{a}"), viewOf(p, 2, "{b}"),
                        viewOf(p, 3, "{a,b}")};
  fsdp_rt_counters_reset();
  for (const GroupView &g : groups) {
    t.allGather(g, fsdp_type{F32, 2, {2, 3}}, 0);
    t.allGather(g, fsdp_type{F32, 3, {2, 3, 2}}, 1);
    t.allGather(g, fsdp_type{I64, 3, {2, 3, 2}}, 2);
    t.reduceScatter(g, fsdp_type{F32, 2, {2, 3}}, 0, FSDP_REDUCE_SUM);
    t.reduceScatter(g, fsdp_type{F32, 3, {2, 3, 2}}, 1, FSDP_REDUCE_AVG);
    t.reduceScatter(g, fsdp_type{BF16, 3, {2, 3, 2}}, 2, FSDP_REDUCE_MAX);
    t.reduceScatter(g, fsdp_type{BF16, 2, {3, 2}}, 1, FSDP_REDUCE_SUM);
    t.allReduce(g, fsdp_type{F32, 2, {3, 5}}, FSDP_REDUCE_SUM);
    t.allReduce(g, fsdp_type{F32, 1, {7}}, FSDP_REDUCE_AVG);
    t.allReduce(g, fsdp_type{BF16, 2, {3, 5}}, FSDP_REDUCE_AVG);
    t.allReduce(g, fsdp_type{I32, 1, {7}}, FSDP_REDUCE_MAX);
    t.allReduce(g, fsdp_type{I64, 0, {}}, FSDP_REDUCE_SUM);
    t.allToAll(g, fsdp_type{F32, 3, {2, 3, 2}}, 0, 1);
    t.allToAll(g, fsdp_type{F32, 4, {2, 2, 3, 2}}, 2, 1);
    t.allToAll(g, fsdp_type{I64, 3, {2, 3, 2}}, 1, 1);
    t.permute(g, fsdp_type{F32, 2, {2, 3}}, 1);
    t.permute(g, fsdp_type{F32, 2, {2, 3}}, -1);
    t.broadcast(g, fsdp_type{F32, 2, {2, 3}}, g.size - 1);
    t.allToAllV(g, fsdp_type{F32, 2, {1, 3}}, 0);
    t.allToAllV(g, fsdp_type{BF16, 3, {1, 2, 2}}, 1);
  }
  // Counters: per-rank bytes sent as docs/runtime-abi.md defines them.
  for (int k = 0; k < FSDP_RT_NUM_COLLECTIVE_KINDS; ++k)
    for (uint32_t mask = 1; mask < 4; ++mask) {
      auto kind = fsdp_rt_collective_kind(k);
      if (fsdp_rt_collective_bytes(kind, mask) != t.bytes[k][mask] ||
          fsdp_rt_collective_calls(kind, mask) != t.calls[k][mask]) {
        std::fprintf(stderr,
                     "counter of kind %d mask %u: %lld bytes / %lld calls, "
                     "expected %lld / %lld\n",
                     k, mask, (long long)fsdp_rt_collective_bytes(kind, mask),
                     (long long)fsdp_rt_collective_calls(kind, mask),
                     (long long)t.bytes[k][mask], (long long)t.calls[k][mask]);
        std::exit(1);
      }
    }
  if (t.rank == 0)
    std::printf("collective counters ok\n");
}
