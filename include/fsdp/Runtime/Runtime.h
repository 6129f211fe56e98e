//===- Runtime.h - The C ABI that generated programs call ---------*- C -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// Generated per-rank programs (EmitC) call only the functions declared here,
// so the CPU and CUDA backends are interchangeable at link time. Everything is
// plain C: tensors are untyped pointers plus an element type and int64 dims,
// all contiguous and row-major. See docs/runtime-abi.md.
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_RUNTIME_RUNTIME_H
#define FSDP_RUNTIME_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

//===----------------------------------------------------------------------===//
// Element types
//===----------------------------------------------------------------------===//

/// Element type of a tensor buffer. bf16 and f16 are stored as their 16-bit
/// patterns; kernels compute in f32 and round to nearest even on store.
typedef enum fsdp_rt_dtype {
  FSDP_RT_F32 = 0,
  FSDP_RT_BF16 = 1,
  FSDP_RT_F16 = 2,
  FSDP_RT_I32 = 3,
  FSDP_RT_I64 = 4,
} fsdp_rt_dtype;

/// Size in bytes of one element of `dtype`.
size_t fsdp_rt_dtype_size(fsdp_rt_dtype dtype);

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

/// Allocates `bytes` bytes aligned to 64 bytes; returns NULL on failure. The
/// allocation counts towards the current and peak byte counters.
void *fsdp_rt_alloc(size_t bytes);
/// Frees a buffer from fsdp_rt_alloc; NULL is ignored.
void fsdp_rt_free(void *ptr);
/// Bytes currently allocated through fsdp_rt_alloc.
int64_t fsdp_rt_memory_current(void);
/// Highest value fsdp_rt_memory_current reached since the last reset.
int64_t fsdp_rt_memory_peak(void);
/// Sets the peak to the current value, to measure one phase of a step.
void fsdp_rt_memory_reset_peak(void);
/// The most memory the backend held from its allocator at once (since the
/// start): on CUDA the memory pool's reserved high-water mark, kernel
/// temporaries and fragmentation included (PyTorch's max_memory_reserved);
/// on the CPU backend the peak of fsdp_rt_memory_current.
int64_t fsdp_rt_memory_reserved_peak(void);

//===----------------------------------------------------------------------===//
// Streams and events
//===----------------------------------------------------------------------===//

/// An ordered queue of kernels. NULL names the default stream. CPU kernels
/// run synchronously on the calling thread, so on CPU the stream and event
/// calls only keep the handles valid; the CUDA backend maps them to
/// cudaStream_t / cudaEvent_t without a change to generated code.
typedef struct fsdp_rt_stream_impl *fsdp_rt_stream;
/// A point in a stream's work that another stream (or the host) can wait on.
typedef struct fsdp_rt_event_impl *fsdp_rt_event;

fsdp_rt_stream fsdp_rt_stream_create(void);
void fsdp_rt_stream_destroy(fsdp_rt_stream stream);
/// Blocks the host until all work queued on `stream` has finished.
void fsdp_rt_stream_synchronize(fsdp_rt_stream stream);
/// Makes later work on `stream` wait until `event` has completed.
void fsdp_rt_stream_wait_event(fsdp_rt_stream stream, fsdp_rt_event event);

fsdp_rt_event fsdp_rt_event_create(void);
void fsdp_rt_event_destroy(fsdp_rt_event event);
/// Marks the current end of `stream`'s queued work.
void fsdp_rt_event_record(fsdp_rt_event event, fsdp_rt_stream stream);
/// Blocks the host until `event` has completed.
void fsdp_rt_event_synchronize(fsdp_rt_event event);

/// Runs `fn(arg)` on a host thread in `stream`'s order: after the work
/// queued on `stream` before it has finished, and before the work queued
/// after it starts. The host does not wait: CUDA queues a host function
/// (which must not call CUDA); the CPU backend, whose streams run as they
/// are queued, calls it at once. `release(arg)` follows once `fn` can run
/// no more: after the call, or, for a call recorded in a step graph, never
/// (each replay runs `fn(arg)` again, so `arg` lives with the process).
void fsdp_rt_host_call(fsdp_rt_stream stream, void (*fn)(void *), void *arg,
                       void (*release)(void *));

//===----------------------------------------------------------------------===//
// Step graphs
//
// A static-shape step queues the same calls on the same buffers at every
// step, once its per-step values (the inputs, the optimizer's step count)
// are read from runtime buffers and its updates are in place. A backend
// that records queued work (CUDA graphs) then lets the host queue a step
// once and replay it, with no per-call launch cost.
//===----------------------------------------------------------------------===//

/// 1 when the backend records and replays work (CUDA), 0 when it does not
/// (CPU): then the other fsdp_rt_graph_* calls fail.
int fsdp_rt_graph_supported(void);
/// Waits for the device and returns the memory it no longer holds, then
/// starts recording the work queued on the default stream, and on the
/// streams that wait on it, instead of running it. Buffers allocated while
/// recording belong to the recording; their addresses hold at every replay.
void fsdp_rt_graph_begin(void);
/// Stops recording and prepares the recording for replay. Fails, naming
/// the cause, when a call could not be recorded (one that waited for the
/// device, or queued work on a stream that did not wait on the default).
void fsdp_rt_graph_end(void);
/// Queues one replay of the recording on the default stream. Buffers the
/// recording allocated and did not free are freed and allocated again at
/// the same addresses, so the previous replay's results must be read first.
void fsdp_rt_graph_launch(void);
/// Waits for the device and frees the recording, if there is one (a no-op
/// otherwise); fsdp_rt_graph_launch fails after it. Called before the
/// communicators are destroyed: NCCL does not destroy a communicator while
/// a recording of its collectives lives.
void fsdp_rt_graph_destroy(void);

/// 1 when runtime buffers are host memory the host layer may read directly
/// (the CPU backend), 0 when they are device memory (CUDA): then the host
/// layer reads a buffer only through fsdp_rt_copy_to_host, which waits.
int fsdp_rt_host_addressable(void);

/// What the backend's kernels run on, for reports: on the CPU, the x86-64
/// level of the vectorized loops and oneDNN's instruction set ("x86-64-v3
/// loops, oneDNN avx2"); on CUDA, the device's compute capability.
const char *fsdp_rt_kernel_isa(void);

/// Sets `bytes` bytes at `ptr` (a buffer from fsdp_rt_alloc) to zero, in
/// order on `stream`.
void fsdp_rt_zero(fsdp_rt_stream stream, void *ptr, size_t bytes);
/// Copies `bytes` from host memory into a runtime buffer, in order on
/// `stream`; the caller may reuse `host_src` on return. On the CPU backend
/// runtime buffers are host memory and this is a copy; on CUDA it is an
/// asynchronous host-to-device transfer, or, into fsdp_rt_host_alloc
/// memory, a host function (a large one waits for the stream instead).
void fsdp_rt_copy_to_device(fsdp_rt_stream stream, void *dst,
                            const void *host_src, size_t bytes);
/// Copies `bytes` from a runtime buffer into host memory, in order on
/// `stream` (after the work queued before it has written the buffer); the
/// host data is complete after fsdp_rt_stream_synchronize.
void fsdp_rt_copy_to_host(fsdp_rt_stream stream, void *host_dst,
                          const void *src, size_t bytes);

/// Host memory the kernels can read and write (CPU offload): on the CPU
/// backend an aligned allocation; on CUDA pinned memory the device maps
/// (kernels read it over the bus), cached and reused in stream order, so
/// neither call waits for the device. Not counted by fsdp_rt_memory_*.
void *fsdp_rt_host_alloc(size_t bytes);
void fsdp_rt_host_free(void *ptr);

//===----------------------------------------------------------------------===//
// Counters
//===----------------------------------------------------------------------===//

/// Collective kinds, one per `dist` collective op, in the order of
/// Collectives.def: FSDP_RT_ALL_GATHER = 0, FSDP_RT_REDUCE_SCATTER, ...
typedef enum fsdp_rt_collective_kind {
#define FSDP_COLLECTIVE(Kind, name, NAME, Traffic, PARAMS, ARGS) FSDP_RT_##NAME,
#include "fsdp/Runtime/Collectives.def"
  FSDP_RT_NUM_COLLECTIVE_KINDS
} fsdp_rt_collective_kind;

/// Mesh axes are numbered by their position in `dist.mesh`; a collective's
/// group is the bit mask of the axes it runs over (`1 << axis`, or'ed), so
/// masks are below `1 << FSDP_RT_MAX_MESH_AXES`.
#define FSDP_RT_MAX_MESH_AXES 8

/// Adds one call moving `bytes` bytes (the per-rank send size) to the counter
/// of (`kind`, `axis_mask`). The communication backend calls this.
void fsdp_rt_count_collective(fsdp_rt_collective_kind kind, uint32_t axis_mask,
                              int64_t bytes);
/// Bytes counted for (`kind`, `axis_mask`) since the last reset.
int64_t fsdp_rt_collective_bytes(fsdp_rt_collective_kind kind,
                                 uint32_t axis_mask);
/// Calls counted for (`kind`, `axis_mask`) since the last reset.
int64_t fsdp_rt_collective_calls(fsdp_rt_collective_kind kind,
                                 uint32_t axis_mask);

/// Kernel classes for the time report, with the kernels each one counts.
typedef enum fsdp_rt_kernel_class {
  FSDP_RT_KERNEL_GEMM = 0,        // linear, matmul, batch_matmul
  FSDP_RT_KERNEL_ELEMENTWISE = 1, // add ... gelu, their grads, reduce_sum_to
  FSDP_RT_KERNEL_NORM = 2,        // rms_norm, layer_norm and their grads
  FSDP_RT_KERNEL_ROTARY = 3,
  FSDP_RT_KERNEL_ATTENTION = 4,
  FSDP_RT_KERNEL_SOFTMAX = 5,
  FSDP_RT_KERNEL_LOSS = 6, // cross_entropy and its grad
  FSDP_RT_KERNEL_EMBEDDING = 7,
  FSDP_RT_KERNEL_DATA_MOVEMENT = 8, // transpose, slice, concat, copy, cast, pad
  FSDP_RT_KERNEL_OPTIMIZER = 9,     // sum_squares, adamw, sgd
  FSDP_RT_NUM_KERNEL_CLASSES = 10,
} fsdp_rt_kernel_class;

/// Wall time in nanoseconds spent in kernels of class `cls` since the last
/// reset. On CPU this is the kernel's own run time; on CUDA it is measured
/// with events.
int64_t fsdp_rt_kernel_time_ns(fsdp_rt_kernel_class cls);
/// Number of kernel calls of class `cls` since the last reset.
int64_t fsdp_rt_kernel_calls(fsdp_rt_kernel_class cls);

/// Kernel calls and time per ABI function (fsdp_rt_linear, ...) since the
/// last reset, longest total first: fills at most `max` entries of `names`,
/// `calls` and `time_ns`, and returns how many functions ran. Times are
/// measured as for fsdp_rt_kernel_time_ns (on CUDA reading them waits for
/// the timing events). The CPU backend names the function that opened the
/// timer, which for some ops is a shared helper (`binary`, `unaryGrad`).
/// Names stay valid until fsdp_rt_counters_reset.
int fsdp_rt_kernel_profile(int max, const char **names, int64_t *calls,
                           int64_t *time_ns);

/// Number of calls that blocked the host on device work since the last
/// reset: fsdp_rt_stream_synchronize, fsdp_rt_event_synchronize and
/// fsdp_rt_copy_to_host (which waits for its copy before the host reads
/// the data), and on CUDA a fsdp_rt_kernel_time_ns read that had to wait for
/// timing events. Kernels never block the host, so a step's count shows
/// every place where the host waited.
int64_t fsdp_rt_host_syncs(void);

/// Query-key pairs (per head) the forward attention kernels scored since
/// the last reset: the pairs each call's mask shows, which context
/// parallelism's load balance makes the same on every rank. The CUDA
/// backend counts the calls without positions only (it would have to read
/// them from the device).
int64_t fsdp_rt_attention_pairs(void);

/// Zeroes the collective, kernel, host-sync and attention-pair counters
/// (not the memory counters).
void fsdp_rt_counters_reset(void);

/// Shares the cores among the `local_ranks` processes of this node: each
/// runs its kernels on cores / local_ranks threads, no more than the cores
/// its affinity mask holds (a launcher's binding) and at least one, unless
/// OMP_NUM_THREADS sets the count.
void fsdp_rt_set_threads(int local_ranks);

//===----------------------------------------------------------------------===//
// Forward kernels
//
// One function per `nn` op (docs/graph-format.md has the semantics). Float
// operands and results of one call share `dtype` (f32, bf16 or f16); index
// operands carry their own type (i32 or i64). Outputs never alias inputs.
// Shapes the compiler already verified are not checked again.
//===----------------------------------------------------------------------===//

/// out[i, :] = table[ids[i] - first_id, :]; table is [vocab, hidden] (rows
/// first_id .. first_id + vocab - 1 of a vocabulary-parallel table, or the
/// whole table with first_id = 0), `num_ids` ids. Ids outside the table's
/// rows give zero rows.
void fsdp_rt_embedding(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                       const void *table, int64_t vocab, int64_t hidden,
                       int64_t first_id, fsdp_rt_dtype ids_dtype,
                       const void *ids, int64_t num_ids, void *out);

/// out[rows, n] = x[rows, k] · weight[n, k]ᵀ + bias[n]; `bias` may be NULL.
void fsdp_rt_linear(fsdp_rt_stream stream, fsdp_rt_dtype dtype, const void *x,
                    const void *weight, const void *bias, int64_t rows,
                    int64_t k, int64_t n, void *out);

/// out[batch, m, n] = op(a[batch])[m, k] · op(b)[k, n], where op swaps the last
/// two dims when the transpose flag is set (a[batch] is then [k, m], b is
/// [n, k]). `batch` is the product of a's leading dims.
void fsdp_rt_matmul(fsdp_rt_stream stream, fsdp_rt_dtype dtype, const void *a,
                    const void *b, int64_t batch, int64_t m, int64_t k,
                    int64_t n, int transpose_a, int transpose_b, void *out);

/// Like fsdp_rt_matmul but b has the same batch dims as a.
void fsdp_rt_batch_matmul(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                          const void *a, const void *b, int64_t batch,
                          int64_t m, int64_t k, int64_t n, int transpose_a,
                          int transpose_b, void *out);

/// Elementwise x op y with NumPy trailing broadcast: shapes are aligned at
/// their last dims and a size-1 (or missing) dim repeats. `out_shape` is the
/// broadcast shape, rank max(x_rank, y_rank). Ranks are at most 8.
void fsdp_rt_add(fsdp_rt_stream stream, fsdp_rt_dtype dtype, const void *x,
                 const int64_t *x_shape, int x_rank, const void *y,
                 const int64_t *y_shape, int y_rank, const int64_t *out_shape,
                 int out_rank, void *out);
void fsdp_rt_sub(fsdp_rt_stream stream, fsdp_rt_dtype dtype, const void *x,
                 const int64_t *x_shape, int x_rank, const void *y,
                 const int64_t *y_shape, int y_rank, const int64_t *out_shape,
                 int out_rank, void *out);
void fsdp_rt_mul(fsdp_rt_stream stream, fsdp_rt_dtype dtype, const void *x,
                 const int64_t *x_shape, int x_rank, const void *y,
                 const int64_t *y_shape, int y_rank, const int64_t *out_shape,
                 int out_rank, void *out);
/// Broadcasting x / y, as fsdp_rt_add.
void fsdp_rt_div(fsdp_rt_stream stream, fsdp_rt_dtype dtype, const void *x,
                 const int64_t *x_shape, int x_rank, const void *y,
                 const int64_t *y_shape, int y_rank, const int64_t *out_shape,
                 int out_rank, void *out);
/// out[0, numel) = value.
void fsdp_rt_fill(fsdp_rt_stream stream, fsdp_rt_dtype dtype, int64_t numel,
                  double value, void *out);

/// Unary elementwise kernels over `numel` elements.
void fsdp_rt_neg(fsdp_rt_stream stream, fsdp_rt_dtype dtype, const void *x,
                 int64_t numel, void *out);
/// out = x · factor.
void fsdp_rt_scale(fsdp_rt_stream stream, fsdp_rt_dtype dtype, const void *x,
                   int64_t numel, double factor, void *out);
/// out = f(x) for each activation f of Activations.def: fsdp_rt_silu, ...
#define FSDP_ACTIVATION(name, forward, gradient)                               \
  void fsdp_rt_##name(fsdp_rt_stream stream, fsdp_rt_dtype dtype,              \
                      const void *x, int64_t numel, void *out);
#include "fsdp/Runtime/Activations.def"
/// GELU with the erf form, or the tanh approximation when `approximate_tanh`.
void fsdp_rt_gelu(fsdp_rt_stream stream, fsdp_rt_dtype dtype, const void *x,
                  int64_t numel, int approximate_tanh, void *out);

/// out[r, :] = x[r, :] / sqrt(mean(x[r, :]²) + eps) · weight, x is [rows, h].
void fsdp_rt_rms_norm(fsdp_rt_stream stream, fsdp_rt_dtype dtype, const void *x,
                      const void *weight, int64_t rows, int64_t h, double eps,
                      void *out);
/// Layer norm over the last dim (biased variance); `bias` may be NULL.
void fsdp_rt_layer_norm(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                        const void *x, const void *weight, const void *bias,
                        int64_t rows, int64_t h, double eps, void *out);

/// Rotary embedding, rotate-half convention, x is [b, s, heads, d] (d even)
/// and `positions` [b, s]. The pair i turns by pos * inv_freq[i], where
/// inv_freq[i] = theta^(-2i/d) unless `inv_freq` (d/2 entries) is given; the
/// result is scaled by `scaling` (YaRN's attention factor, else 1).
void fsdp_rt_rotary(fsdp_rt_stream stream, fsdp_rt_dtype dtype, const void *x,
                    fsdp_rt_dtype positions_dtype, const void *positions,
                    int64_t b, int64_t s, int64_t heads, int64_t d,
                    double theta, const double *inv_freq, double scaling,
                    void *out);

/// Attention of q [b, s, nq, d] over k [b, skv, nkv, d] and
/// v [b, skv, nkv, dv] into out [b, s, nq, dv]; query head h reads kv head
/// h / (nq / nkv). Query i sits at p_i = positions[b, i] (i64 [b, s]) and
/// key j at k_j = key_positions[b, j] (i64 [b, skv], ascending along the
/// row; only with `positions`), else at i and j. With `causal`, query i
/// sees keys with k_j <= p_i; `sliding_window` > 0 further requires
/// p_i - k_j < sliding_window (<= 0 means no window). With
/// `document_positions` (i64 [b, s], packed rows; only with `causal`), query
/// i is at position d_i of its document and further needs k_j >= p_i - d_i.
/// lse [b, nq, s] (f32) receives each query's log Σ_j exp(scale · q·k_j)
/// over the keys it sees, for the backward (-inf, and a zero output row,
/// when it sees none).
void fsdp_rt_attention(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                       const void *q, const void *k, const void *v, int64_t b,
                       int64_t s, int64_t skv, int64_t nq, int64_t nkv,
                       int64_t d, int64_t dv, const int64_t *positions,
                       const int64_t *key_positions,
                       const int64_t *document_positions, int causal,
                       int64_t sliding_window, double scale, void *out,
                       float *lse);

/// Two attentions of the same queries over disjoint keys (out_a, out_b
/// [b, s, nq, dv]; lse_a, lse_b [b, nq, s] f32) as one: lse = log(e^lse_a +
/// e^lse_b), out = e^(lse_a - lse)·out_a + e^(lse_b - lse)·out_b.
void fsdp_rt_attention_combine(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                               const void *out_a, const float *lse_a,
                               const void *out_b, const float *lse_b, int64_t b,
                               int64_t s, int64_t nq, int64_t dv, void *out,
                               float *lse);

/// Softmax along `dim` (negative counts from the end).
void fsdp_rt_softmax(fsdp_rt_stream stream, fsdp_rt_dtype dtype, const void *x,
                     const int64_t *shape, int rank, int dim, void *out);

/// out[r] = max of x[r, 0 .. n-1].
void fsdp_rt_reduce_max(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                        const void *x, int64_t rows, int64_t n, void *out);

/// One vocabulary block of a cross-entropy: logits [rows, vocab] hold
/// classes first_class .. first_class + vocab - 1; shift [rows] (logits'
/// dtype) is the row maximum over the whole vocabulary. sum_exp[r] =
/// Σ exp(logits[r] - shift[r]); target[r] = logits[r, label - first_class] -
/// shift[r] when the label is in the block, else 0 (and for ignored rows).
void fsdp_rt_cross_entropy_partial(
    fsdp_rt_stream stream, fsdp_rt_dtype dtype, const void *logits,
    fsdp_rt_dtype labels_dtype, const void *labels, const void *shift,
    int64_t rows, int64_t vocab, int64_t first_class, int64_t ignore_index,
    int64_t num_classes, float *sum_exp, float *target);

/// The gradient of fsdp_rt_cross_entropy_partial: dlogits[r, i] =
/// exp(logits[r, i] - shift[r]) · dsum_exp[r] + [i is the label] ·
/// dtarget[r]; 0 for the padding classes (from `num_classes` on, when it is
/// > 0).
void fsdp_rt_cross_entropy_partial_grad(
    fsdp_rt_stream stream, fsdp_rt_dtype dtype, const void *logits,
    fsdp_rt_dtype labels_dtype, const void *labels, const void *shift,
    int64_t rows, int64_t vocab, int64_t first_class, int64_t ignore_index,
    int64_t num_classes, const float *dsum_exp, const float *dtarget,
    void *dlogits);

/// Reduction of fsdp_rt_cross_entropy.
typedef enum fsdp_rt_reduction {
  FSDP_RT_REDUCTION_NONE = 0,
  FSDP_RT_REDUCTION_MEAN = 1,
  FSDP_RT_REDUCTION_SUM = 2,
} fsdp_rt_reduction;

/// Cross-entropy of logits [rows, vocab] against `labels` [rows]. `out` (f32)
/// holds `rows` losses for NONE, one scalar otherwise. `count`, if not NULL,
/// receives the number of labels different from `ignore_index`, which the
/// training step needs to divide a SUM by the global token count.
void fsdp_rt_cross_entropy(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                           const void *logits, fsdp_rt_dtype labels_dtype,
                           const void *labels, int64_t rows, int64_t vocab,
                           int64_t ignore_index, fsdp_rt_reduction reduction,
                           float *out, int64_t *count);

/// Cross-entropy from the summed blocks of fsdp_rt_cross_entropy_partial:
/// each counted row's loss is log(sum_exp[r]) - target[r]. `out` and
/// `count` as for fsdp_rt_cross_entropy.
void fsdp_rt_cross_entropy_combine(fsdp_rt_stream stream, const float *sum_exp,
                                   const float *target,
                                   fsdp_rt_dtype labels_dtype,
                                   const void *labels, int64_t rows,
                                   int64_t ignore_index,
                                   fsdp_rt_reduction reduction, float *out,
                                   int64_t *count);

/// Gradient of fsdp_rt_cross_entropy_combine: for a counted row with loss
/// gradient g_r (as for fsdp_rt_cross_entropy_grad), dsum_exp[r] =
/// g_r / sum_exp[r] and dtarget[r] = -g_r; ignored rows get 0.
void fsdp_rt_cross_entropy_combine_grad(
    fsdp_rt_stream stream, const float *sum_exp, fsdp_rt_dtype labels_dtype,
    const void *labels, int64_t rows, int64_t ignore_index,
    fsdp_rt_reduction reduction, const float *dloss, float *dsum_exp,
    float *dtarget);

// Data movement works for every element type, integers included.

/// out = x with dims permuted: out dim i is x dim perm[i].
void fsdp_rt_transpose(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                       const void *x, const int64_t *shape, int rank,
                       const int64_t *perm, void *out);
/// out = x restricted to [start, start + size) along `dim`.
void fsdp_rt_slice(fsdp_rt_stream stream, fsdp_rt_dtype dtype, const void *x,
                   const int64_t *shape, int rank, int dim, int64_t start,
                   int64_t size, void *out);
/// Joins `num_inputs` tensors along `dim`. `out_shape` is the result shape and
/// `dim_sizes[i]` the size of input i along `dim`.
void fsdp_rt_concat(fsdp_rt_stream stream, fsdp_rt_dtype dtype, int num_inputs,
                    const void *const *inputs, const int64_t *dim_sizes,
                    const int64_t *out_shape, int rank, int dim, void *out);
/// Copies `rows` rows of `width` bytes from `src` (rows `src_pitch` bytes
/// apart) to `dst` (rows `dst_pitch` bytes apart): a strided block copy
/// between runtime buffers (cudaMemcpy2DAsync on CUDA; a host function
/// between two fsdp_rt_host_alloc buffers, in stream order).
void fsdp_rt_copy_2d(fsdp_rt_stream stream, void *dst, size_t dst_pitch,
                     const void *src, size_t src_pitch, size_t width,
                     size_t rows);
/// Copies `numel` elements; reshape and split lower to this (or to views),
/// and the CPU offload copies between device and fsdp_rt_host_alloc memory.
void fsdp_rt_copy(fsdp_rt_stream stream, fsdp_rt_dtype dtype, const void *x,
                  int64_t numel, void *out);
/// Converts `numel` float elements between f32, bf16 and f16.
void fsdp_rt_cast(fsdp_rt_stream stream, fsdp_rt_dtype src_dtype, const void *x,
                  fsdp_rt_dtype dst_dtype, int64_t numel, void *out);

//===----------------------------------------------------------------------===//
// Backward kernels
//
// The vector-Jacobian products of the forward kernels, under the same
// conventions: `dy` is the gradient of the forward result, the `d*` outputs
// the gradients of its operands. Each kernel times itself into the class of
// its forward kernel. Reductions over rows accumulate in double.
//===----------------------------------------------------------------------===//

/// dx = dy · f'(x) for each activation f of Activations.def:
/// fsdp_rt_silu_grad, ...
#define FSDP_ACTIVATION(name, forward, gradient)                               \
  void fsdp_rt_##name##_grad(fsdp_rt_stream stream, fsdp_rt_dtype dtype,       \
                             const void *x, const void *dy, int64_t numel,     \
                             void *dx);
#include "fsdp/Runtime/Activations.def"
/// dx = dy · gelu'(x), erf form or tanh approximation as in fsdp_rt_gelu.
void fsdp_rt_gelu_grad(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                       const void *x, const void *dy, int64_t numel,
                       int approximate_tanh, void *dx);

/// Gradients of fsdp_rt_rms_norm: dx [rows, h] and dweight [h], summed over
/// the rows.
void fsdp_rt_rms_norm_grad(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                           const void *x, const void *weight, const void *dy,
                           int64_t rows, int64_t h, double eps, void *dx,
                           void *dweight);
/// Gradients of fsdp_rt_layer_norm: dx, dweight and, unless `dbias` is NULL,
/// dbias (both [h], summed over the rows).
void fsdp_rt_layer_norm_grad(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                             const void *x, const void *weight, const void *dy,
                             int64_t rows, int64_t h, double eps, void *dx,
                             void *dweight, void *dbias);

/// Gradient of fsdp_rt_rotary with respect to x: the transposed rotation,
/// i.e. the rotation by the negative angle, applied to `dy` (same arguments).
void fsdp_rt_rotary_grad(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                         const void *dy, fsdp_rt_dtype positions_dtype,
                         const void *positions, int64_t b, int64_t s,
                         int64_t heads, int64_t d, double theta,
                         const double *inv_freq, double scaling, void *dx);

/// Gradients of fsdp_rt_attention: dq [b, s, nq, d], dk [b, skv, nkv, d]
/// and dvalue [b, skv, nkv, dv] from dout [b, s, nq, dv] and, when the
/// statistics were read on (attention_combine), their gradient dlse
/// [b, nq, s] (else NULL). The probabilities are
/// rebuilt from the forward's lse in one pass; dk and dvalue sum over the
/// query heads sharing a KV head. `out` is the forward's result: every
/// backend takes the row sums Σ_j P·dP as rowsum(dout ∘ out), so that a
/// ring step given the merged attention's out, lse and gradients gets its
/// keys' share of the merged gradient.
void fsdp_rt_attention_grad(
    fsdp_rt_stream stream, fsdp_rt_dtype dtype, const void *q, const void *k,
    const void *v, const void *out, const float *lse, const void *dout,
    const float *dlse, int64_t b, int64_t s, int64_t skv, int64_t nq,
    int64_t nkv, int64_t d, int64_t dv, const int64_t *positions,
    const int64_t *key_positions, const int64_t *document_positions, int causal,
    int64_t sliding_window, double scale, void *dq, void *dk, void *dvalue);

/// Gradients of fsdp_rt_attention_combine from dout (and dlse, or NULL):
/// w_x = e^(lse_x - lse); dout_x = w_x·dout, dlse_x = w_x·(dlse +
/// Σ_d dout·(out_x - out)).
void fsdp_rt_attention_combine_grad(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                                    const void *out_a, const float *lse_a,
                                    const void *out_b, const float *lse_b,
                                    const void *out, const float *lse,
                                    const void *dout, const float *dlse,
                                    int64_t b, int64_t s, int64_t nq,
                                    int64_t dv, void *dout_a, float *dlse_a,
                                    void *dout_b, float *dlse_b);

/// Gradient of fsdp_rt_softmax from its output: dx = y · (dy - Σ y·dy) along
/// `dim`.
void fsdp_rt_softmax_grad(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                          const void *y, const void *dy, const int64_t *shape,
                          int rank, int dim, void *dx);

/// Gradient of fsdp_rt_embedding: zeroes dtable [vocab, hidden], then adds
/// row i of dy [num_ids, hidden] to row ids[i] - first_id (repeated ids
/// accumulate; ids outside the table's rows add nothing).
void fsdp_rt_embedding_grad(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                            fsdp_rt_dtype ids_dtype, const void *ids,
                            int64_t num_ids, const void *dy, int64_t vocab,
                            int64_t hidden, int64_t first_id, void *dtable);

/// Gradient of fsdp_rt_cross_entropy: dlogits[r] = g_r · (softmax(logits[r])
/// - onehot(labels[r])), zero for ignored rows, where g_r is dloss[0] for
/// SUM, dloss[0] / (number of non-ignored rows) for MEAN and dloss[r] for
/// NONE.
void fsdp_rt_cross_entropy_grad(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                                const void *logits, fsdp_rt_dtype labels_dtype,
                                const void *labels, int64_t rows, int64_t vocab,
                                int64_t ignore_index,
                                fsdp_rt_reduction reduction, const float *dloss,
                                void *dlogits);

/// Sums x down to `out_shape`, which broadcasts to `in_shape` by the NumPy
/// rule (aligned at the last dims; each out dim is 1 or equal): the gradient
/// of a broadcasting operand. Ranks are at most 8.
void fsdp_rt_reduce_sum_to(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                           const void *x, const int64_t *in_shape, int in_rank,
                           const int64_t *out_shape, int out_rank, void *out);

/// out = x with `before` and `after` zeros added along `dim` (the gradient of
/// fsdp_rt_slice); `shape` is x's shape. Works for every element type.
void fsdp_rt_pad(fsdp_rt_stream stream, fsdp_rt_dtype dtype, const void *x,
                 const int64_t *shape, int rank, int dim, int64_t before,
                 int64_t after, void *out);

//===----------------------------------------------------------------------===//
// Optimizer kernels
//
// Parameters and optimizer state are f32; the gradient has its own float
// type. Each update uses g = grad_scale · grad, which is how the step applies
// global gradient-norm clipping. `step` is a runtime buffer too: the f32
// scalar step count, from 1, which the data loader uploads before each step,
// so that a step's calls are the same at every step (a CUDA graph replays
// them).
//===----------------------------------------------------------------------===//

/// out[0] = Σ x² over `numel` elements, accumulated in double; the squared
/// norm that gradient clipping sums over all gradients.
void fsdp_rt_sum_squares(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                         const void *x, int64_t numel, float *out);

/// One tensor of fsdp_rt_adamw: its parameter, moments, their new values
/// (which may be the same buffers, for an update in place), its gradient
/// and its size.
typedef struct fsdp_rt_adamw_tensor {
  const float *param, *exp_avg, *exp_avg_sq;
  float *new_param, *new_exp_avg, *new_exp_avg_sq;
  const void *grad;
  int64_t numel;
} fsdp_rt_adamw_tensor;

/// One torch.optim.AdamW step on `count` tensors that share the
/// hyperparameters, the gradients' type, `step` and `grad_scale`:
/// p *= 1 - lr·weight_decay; m = β1·m + (1-β1)·g; v = β2·v + (1-β2)·g²;
/// p -= lr · (m / (1-β1^step)) / (sqrt(v / (1-β2^step)) + eps), with
/// g = grad_scale · grad. The multi-tensor (fused) form: on CUDA one launch
/// per FSDP_RT_ADAMW_TABLE tensors, on the CPU one parallel loop.
/// `grad_scale` (an f32 scalar the step computes, such as the clipping
/// coefficient), `step` and `lr_scale` (the schedule's factor of `lr`;
/// NULL: 1) are runtime buffers, read by the kernel so that the host never
/// waits for them.
void fsdp_rt_adamw(fsdp_rt_stream stream, int64_t count,
                   const fsdp_rt_adamw_tensor *tensors,
                   fsdp_rt_dtype grad_dtype, double lr, double beta1,
                   double beta2, double eps, double weight_decay,
                   const float *step, const float *grad_scale,
                   const float *lr_scale);
/// The tensors one CUDA launch of fsdp_rt_adamw takes: the table
/// travels as a kernel argument (under 4 KiB).
#define FSDP_RT_ADAMW_TABLE 40

/// One torch.optim.SGD step (no dampening, not Nesterov): g += weight_decay·p;
/// buf = g at step 1, momentum·buf + g after; p -= lr·buf. With momentum 0
/// there is no buffer (`momentum_buffer` may be NULL) and p -= lr·g. The
/// learning rate is lr · lr_scale[0] (`lr_scale` NULL: lr).
void fsdp_rt_sgd(fsdp_rt_stream stream, float *param, float *momentum_buffer,
                 fsdp_rt_dtype grad_dtype, const void *grad, int64_t numel,
                 double lr, double momentum, double weight_decay,
                 const float *step, const float *grad_scale,
                 const float *lr_scale);

/// out[0] = the number of `labels` different from `ignore_index`, as f32:
/// the tokens a mean loss divides by.
void fsdp_rt_count_labels(fsdp_rt_stream stream, fsdp_rt_dtype labels_dtype,
                          const void *labels, int64_t numel,
                          int64_t ignore_index, float *out);

/// A learning-rate schedule (fsdp-build-train-step's lr-schedule; the
/// values of nn.lr_schedule's `schedule`).
typedef enum fsdp_rt_lr_schedule_kind {
  FSDP_LR_CONSTANT = 0,
  FSDP_LR_LINEAR = 1,
  FSDP_LR_COSINE = 2,
} fsdp_rt_lr_schedule_kind;

/// out[0] = the factor of optimizer step step[0] (1-based) under `schedule`
/// with `warmup_steps`, `total_steps` and `min_ratio`, as transformers'
/// get_scheduler defines it (lib/Runtime/Common/LrSchedule.h), computed in
/// double from the step count on the device: no host wait, and a resumed
/// run continues the schedule.
void fsdp_rt_lr_schedule(fsdp_rt_stream stream, const float *step,
                         fsdp_rt_lr_schedule_kind schedule,
                         int64_t warmup_steps, int64_t total_steps,
                         double min_ratio, float *out);

/// out[0] = min(1, max_norm / (sqrt(sum_of_squares[0]) + 1e-6)), computed in
/// double: torch.nn.utils.clip_grad_norm_'s coefficient, left on the device.
void fsdp_rt_clip_coefficient(fsdp_rt_stream stream,
                              const float *sum_of_squares, double max_norm,
                              float *out);

//===----------------------------------------------------------------------===//
// Mixture of experts (nn.moe_*, nn.grouped_linear)
//===----------------------------------------------------------------------===//
// T tokens route each to `top_k` of E experts; slot (t, j) of a token is
// index t·top_k + j of `indices` (i64, [T, top_k]). Rows in expert order
// hold the slots ordered by expert, then by slot. Counts are i64 and stay
// on the device: no kernel here waits for the host.

/// p = softmax(logits[t]) in f32 ([T, E] of `dtype`); indices[t] = the
/// top_k largest (descending, ties to the lower expert) and weights[t]
/// their p, divided by their sum with `normalize` (weights in `dtype`).
void fsdp_rt_moe_router(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                        const void *logits, int64_t tokens, int64_t experts,
                        int64_t top_k, int normalize, void *weights,
                        int64_t *indices);
/// dlogits of fsdp_rt_moe_router from dweights [T, top_k].
void fsdp_rt_moe_router_grad(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                             const void *logits, const int64_t *indices,
                             const void *dweights, int64_t tokens,
                             int64_t experts, int64_t top_k, int normalize,
                             void *dlogits);
/// rows [T·top_k, hidden] = x[t] for each slot, in expert order; counts [E]
/// = the rows of each expert. An index outside [0, E) aborts.
void fsdp_rt_moe_permute(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                         const void *x, const int64_t *indices, int64_t tokens,
                         int64_t hidden, int64_t top_k, int64_t experts,
                         void *rows, int64_t *counts);
/// out[t] = Σ_j weights[t, j] · rows[slot (t, j)] (weights NULL: 1).
void fsdp_rt_moe_unpermute(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                           const void *rows, const int64_t *indices,
                           const void *weights, int64_t tokens, int64_t hidden,
                           int64_t top_k, int64_t experts, void *out);
/// drows[slot (t, j)] = weights[t, j] · dy[t]; dweights[t, j] =
/// rows[slot (t, j)] · dy[t].
void fsdp_rt_moe_unpermute_grad(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                                const void *rows, const int64_t *indices,
                                const void *weights, const void *dy,
                                int64_t tokens, int64_t hidden, int64_t top_k,
                                int64_t experts, void *drows, void *dweights);
/// out [rows, n]: consecutive segments of counts[g] rows of x [rows, k] times
/// w[g mod experts]ᵀ (w [experts, n, k]); rows past Σ counts are zero (a
/// sum over rows aborts).
void fsdp_rt_grouped_linear(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                            const void *x, int64_t rows, int64_t k,
                            const int64_t *counts, int64_t segments,
                            const void *w, int64_t experts, int64_t n,
                            void *out);
/// Gradients of fsdp_rt_grouped_linear: dx [rows, k] (zero past Σ counts)
/// and dw [experts, n, k] (summed over an expert's segments).
void fsdp_rt_grouped_linear_grad(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                                 const void *x, int64_t rows, int64_t k,
                                 const int64_t *counts, int64_t segments,
                                 const void *w, int64_t experts, int64_t n,
                                 const void *dy, void *dx, void *dw);
/// out[r] = the sum of counts' block r of n / ranks entries.
void fsdp_rt_moe_rank_counts(fsdp_rt_stream stream, const int64_t *counts,
                             int64_t n, int64_t ranks, int64_t *out);
/// stats [2E + 1] f32: per expert the top_k selections, then the sums of
/// softmax(logits[t]) over the T tokens, then T.
void fsdp_rt_moe_aux_stats(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                           const void *logits, int64_t tokens, int64_t experts,
                           int64_t top_k, float *stats);
/// dlogits of fsdp_rt_moe_aux_stats from dstats (only the probability sums'
/// part is read).
void fsdp_rt_moe_aux_stats_grad(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                                const void *logits, int64_t tokens,
                                int64_t experts, const float *dstats,
                                void *dlogits);
/// out[0] = E · Σ_e count_e · prob_e / rows² of stats [2E + 1] (0 for no
/// rows): transformers' load-balancing loss.
void fsdp_rt_moe_aux_combine(fsdp_rt_stream stream, const float *stats,
                             int64_t experts, float *out);
/// dstats = dy[0] · E · count_e / rows² at the probability sums, zero else.
void fsdp_rt_moe_aux_combine_grad(fsdp_rt_stream stream, const float *stats,
                                  int64_t experts, const float *dy,
                                  float *dstats);

#ifdef __cplusplus
} // extern "C"
#endif

#endif // FSDP_RUNTIME_RUNTIME_H
