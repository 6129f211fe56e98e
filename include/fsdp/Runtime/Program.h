//===- Program.h - What a generated program calls ---------------*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The contract between code that `fsdp-lower-to-runtime` + EmitC generate and
// the runtime. A compiled program defines two functions:
//
//   void fsdp_program_describe(fsdp_program *p);  // mesh, inputs, params, ...
//   void fsdp_program_forward(fsdp_program *p);   // one step
//
// and the runtime's `main` (lib/Runtime/Host) calls them: describe once, then
// it checks the rank count against the mesh, creates the communicators,
// initializes or loads parameters, and runs the step on each batch.
//
// Tensors are reference-counted handles owned by the runtime. An op returns a
// new handle that the program releases after its last use; inputs and
// parameters are borrowed; outputs are handed over with fsdp_prog_result.
// Every op receives its result type (dtype and static dims) from the
// compiler, so the runtime never re-derives shapes; it checks them.
//
// This header is C++ (generated code is C++): `fsdp_type{...}` literals are
// aggregates written directly into calls.
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_RUNTIME_PROGRAM_H
#define FSDP_RUNTIME_PROGRAM_H

#include "fsdp/Runtime/Runtime.h"

#include <cstdint>

/// The runtime's per-rank state: mesh, communicators, inputs, parameters,
/// outputs, counters.
struct fsdp_program;
/// A tensor handle.
struct fsdp_tensor;
/// A collective in flight.
struct fsdp_future;
/// The handles passed to and from a function emitted once for many layers.
struct fsdp_frame;

/// A tensor type: element type and static dims (row-major, contiguous).
struct fsdp_type {
  fsdp_rt_dtype dtype;
  int64_t rank;
  int64_t dims[8];
};

/// A list of at most 8 integers (a permutation).
struct fsdp_ints {
  int64_t size;
  int64_t values[8];
};

/// Parameter initializers (`#nn.init`).
enum fsdp_init_kind {
  FSDP_INIT_ZEROS = 0,
  FSDP_INIT_ONES = 1,
  FSDP_INIT_NORMAL = 2,  // a = mean, b = std
  FSDP_INIT_UNIFORM = 3, // a = low, b = high
};

/// Reductions of collectives (`#dist.reduction`).
enum fsdp_reduction {
  FSDP_REDUCE_SUM = 0,
  FSDP_REDUCE_AVG = 1,
  FSDP_REDUCE_MAX = 2,
};

/// Cross-entropy reductions.
enum fsdp_loss_reduction {
  FSDP_LOSS_MEAN = 0,
  FSDP_LOSS_SUM = 1,
  FSDP_LOSS_NONE = 2,
};

//===----------------------------------------------------------------------===//
// Description (called from fsdp_program_describe)
//===----------------------------------------------------------------------===//

/// Adds a mesh axis; axes are numbered in declaration order (major first).
void fsdp_prog_mesh_axis(fsdp_program *p, const char *name, int64_t size);
/// Declares a data input (`nn.input`), argument `index` of the step.
void fsdp_prog_input(fsdp_program *p, const char *name, fsdp_type type);
/// Input `name`'s dim 0 (the batch) is split over the mesh axes in
/// `axis_mask` (data parallelism): the rank holds its block of the samples.
void fsdp_prog_input_split(fsdp_program *p, const char *name,
                           uint32_t axis_mask);
/// Input `name` ([B, S] tokens) holds this rank's part of the sequence
/// over the mesh axes in `axis_mask` (context parallelism): of the
/// sequence's 2·n chunks for the n ranks of the group, chunks i and
/// 2·n−1−i on the group's rank i.
void fsdp_prog_input_sequence_split(fsdp_program *p, const char *name,
                                    uint32_t axis_mask);
/// Input `name`'s sequence split (fsdp_prog_input_sequence_split) repeats
/// over `rounds` rounds: of its 2·n·rounds chunks, group rank i holds
/// chunks 2·n·m + i and 2·n·m + 2·n−1−i of each round m, in order.
void fsdp_prog_input_sequence_rounds(fsdp_program *p, const char *name,
                                     int64_t rounds);
/// Declares that integer input `name` (already declared) holds token ids in
/// [0, high): the runtime's synthetic data draws from that range and data
/// read from a file is checked against it. Default: [0, 2).
void fsdp_prog_input_range(fsdp_program *p, const char *name, int64_t high);
/// Declares that input `name` ([B, S] integers, already declared) holds
/// each token's position in its document: a packed attention reads it. The
/// data loader restarts it at 0 after each end-of-document token (--eos).
void fsdp_prog_input_documents(fsdp_program *p, const char *name);
/// Declares that a label of input `name` (already declared) equal to
/// `ignore_index` does not count in the loss: the data loader writes it
/// where no label must count (after an end-of-document token, padding).
void fsdp_prog_input_ignore(fsdp_program *p, const char *name,
                            int64_t ignore_index);
/// Declares a parameter (`nn.param`) with its initializer.
void fsdp_prog_param(fsdp_program *p, const char *name, fsdp_type type,
                     fsdp_init_kind init, double a, double b);
/// Declares a parameter of which this rank holds one block: `type` is the
/// block, `global_dims` the whole tensor's dims, and `dim_axes.values[d]`
/// the mesh axes that split dim d, major first, as 4-bit fields (axis index
/// + 1) from the lowest bits up (0: whole), `dim_groups.values[d]`
/// the number of equal groups dim d is cut into before each is split (1:
/// a plain split; see #dist.sharding's groups), `dim_inner.values[d]` how
/// many of dim d's trailing axes split, as a second level, the block the
/// leading ones leave (FSDP within tensor parallelism): that level's blocks
/// are padded at the end of the outer block when it does not divide, and
/// `global_dims` is then the real whole size. The runtime fills the block
/// with exactly the values those elements have in the whole tensor, without
/// building the whole tensor.
void fsdp_prog_param_shard(fsdp_program *p, const char *name, fsdp_type type,
                           fsdp_init_kind init, double a, double b,
                           fsdp_ints global_dims, fsdp_ints dim_axes,
                           fsdp_ints dim_groups, fsdp_ints dim_inner);
/// Output `index` is this rank's block of a split tensor: per dim, the
/// splitting axes (packed as for fsdp_prog_param_shard) and the group
/// count. Only dumps use it, to describe the blocks.
void fsdp_prog_output_shard(fsdp_program *p, int64_t index, fsdp_ints dim_axes,
                            fsdp_ints dim_groups);
/// Declares output `index` (`nn.output`).
void fsdp_prog_output_name(fsdp_program *p, const char *name);
/// Declares a communicator over the mesh axes in `axis_mask` (bit i = axis
/// i); all are created before the first step.
void fsdp_prog_group(fsdp_program *p, uint32_t axis_mask);

//===----------------------------------------------------------------------===//
// Step (called from fsdp_program_forward)
//===----------------------------------------------------------------------===//

/// Argument `index` of the step: inputs first, then parameters, in
/// declaration order. Borrowed.
fsdp_tensor *fsdp_prog_arg(fsdp_program *p, int64_t index);
/// Hands `t` over as output `index`. The runtime takes a reference of its
/// own, so the step still releases an op result after this call (and does
/// not release an argument, which it only borrows).
void fsdp_prog_result(fsdp_program *p, int64_t index, fsdp_tensor *t);
/// Drops the program's reference to `t`.
void fsdp_release(fsdp_tensor *t);
/// Adds a reference to `t` and returns it (for code that keeps a tensor past
/// the step's own release).
fsdp_tensor *fsdp_retain(fsdp_tensor *t);
/// This rank's coordinate along mesh axis `axis` (for rank-dependent code
/// such as an axis index; valid from the first step on).
int64_t fsdp_prog_mesh_coord(fsdp_program *p, int64_t axis);
/// A new zero-filled tensor of type `type` (constants, tests).
fsdp_tensor *fsdp_tensor_new(fsdp_program *p, fsdp_type type);
/// The contiguous row-major buffer of `t` (64-byte aligned).
void *fsdp_tensor_data(fsdp_tensor *t);

/// A frame: the tensor handles passed to and from a function the compiler
/// emitted once for many layers (inputs first, then outputs). It holds no
/// references of its own; whoever owns a handle still releases it.
fsdp_frame *fsdp_frame_new(fsdp_program *p, int64_t size);
void fsdp_frame_set(fsdp_frame *f, int64_t index, fsdp_tensor *t);
fsdp_tensor *fsdp_frame_get(fsdp_frame *f, int64_t index);
/// A future in a frame slot: an async collective one layer function starts
/// and another waits on.
void fsdp_frame_set_future(fsdp_frame *f, int64_t index, fsdp_future *future);
fsdp_future *fsdp_frame_get_future(fsdp_frame *f, int64_t index);
void fsdp_frame_free(fsdp_frame *f);

//===----------------------------------------------------------------------===//
// nn ops: each returns a new tensor of type `r`
//===----------------------------------------------------------------------===//

/// `shard_index` (a scalar i64, may be null): the table is that block of a
/// vocabulary-parallel table, and ids outside it give zero rows.
fsdp_tensor *fsdp_op_embedding(fsdp_program *p, fsdp_type r, fsdp_tensor *table,
                               fsdp_tensor *ids, fsdp_tensor *shard_index);
/// `bias` may be null.
fsdp_tensor *fsdp_op_linear(fsdp_program *p, fsdp_type r, fsdp_tensor *x,
                            fsdp_tensor *w, fsdp_tensor *bias);
fsdp_tensor *fsdp_op_matmul(fsdp_program *p, fsdp_type r, fsdp_tensor *a,
                            fsdp_tensor *b, bool transpose_a, bool transpose_b);
fsdp_tensor *fsdp_op_batch_matmul(fsdp_program *p, fsdp_type r, fsdp_tensor *a,
                                  fsdp_tensor *b, bool transpose_a,
                                  bool transpose_b);
fsdp_tensor *fsdp_op_add(fsdp_program *p, fsdp_type r, fsdp_tensor *a,
                         fsdp_tensor *b);
fsdp_tensor *fsdp_op_sub(fsdp_program *p, fsdp_type r, fsdp_tensor *a,
                         fsdp_tensor *b);
fsdp_tensor *fsdp_op_mul(fsdp_program *p, fsdp_type r, fsdp_tensor *a,
                         fsdp_tensor *b);
fsdp_tensor *fsdp_op_neg(fsdp_program *p, fsdp_type r, fsdp_tensor *x);
fsdp_tensor *fsdp_op_scale(fsdp_program *p, fsdp_type r, fsdp_tensor *x,
                           double factor);
/// The activations of Activations.def: fsdp_op_silu, ...
#define FSDP_ACTIVATION(name, forward, gradient)                               \
  fsdp_tensor *fsdp_op_##name(fsdp_program *p, fsdp_type r, fsdp_tensor *x);
#include "fsdp/Runtime/Activations.def"
/// `tanh_approximation` selects gelu's tanh form, else erf.
fsdp_tensor *fsdp_op_gelu(fsdp_program *p, fsdp_type r, fsdp_tensor *x,
                          bool tanh_approximation);
fsdp_tensor *fsdp_op_rms_norm(fsdp_program *p, fsdp_type r, fsdp_tensor *x,
                              fsdp_tensor *w, double eps);
/// `bias` may be null.
fsdp_tensor *fsdp_op_layer_norm(fsdp_program *p, fsdp_type r, fsdp_tensor *x,
                                fsdp_tensor *w, fsdp_tensor *bias, double eps);
/// `inv_freq` (head dim / 2 entries) replaces theta's frequencies unless
/// NULL; the rotation is scaled by `attention_scaling`. With `inverse`, the
/// rotation by the negative angle (rotary's transpose, its gradient).
fsdp_tensor *fsdp_op_rotary(fsdp_program *p, fsdp_type r, fsdp_tensor *x,
                            fsdp_tensor *positions, double theta,
                            const double *inv_freq, double attention_scaling,
                            bool inverse);
/// `sliding_window` <= 0 means none; `scale` <= 0 means 1/sqrt(D);
/// `positions` (i64 [B, S]) and `key_positions` (i64 [B, Skv]), or NULL,
/// place the queries and keys in the sequence. With `packed`, the queries'
/// positions in their documents (i64 [B, S]) come first, in `pos0`, and the
/// query and key positions follow; else `pos0` and `pos1` are the query and
/// key positions. Writes the result and the f32 statistics `lse`
/// [B, Nq, S].
void fsdp_op_attention(fsdp_program *p, fsdp_tensor *out, fsdp_tensor *lse,
                       fsdp_tensor *q, fsdp_tensor *k, fsdp_tensor *v,
                       fsdp_tensor *pos0, fsdp_tensor *pos1, fsdp_tensor *pos2,
                       bool causal, int64_t sliding_window, double scale,
                       bool packed);
void fsdp_op_attention_combine(fsdp_program *p, fsdp_tensor *out,
                               fsdp_tensor *lse, fsdp_tensor *out_a,
                               fsdp_tensor *lse_a, fsdp_tensor *out_b,
                               fsdp_tensor *lse_b);
/// `dim` is non-negative.
fsdp_tensor *fsdp_op_softmax(fsdp_program *p, fsdp_type r, fsdp_tensor *x,
                             int64_t dim);
/// Same elements, type `r`.
fsdp_tensor *fsdp_op_reshape(fsdp_program *p, fsdp_type r, fsdp_tensor *x);
/// Result dim i is input dim `perm.values[i]`.
fsdp_tensor *fsdp_op_transpose(fsdp_program *p, fsdp_type r, fsdp_tensor *x,
                               fsdp_ints perm);
/// `dim` is non-negative; the result is `[start, start + r.dims[dim])`.
fsdp_tensor *fsdp_op_slice(fsdp_program *p, fsdp_type r, fsdp_tensor *x,
                           int64_t dim, int64_t start);
/// Joins `n` tensors (the variadic arguments, each an `fsdp_tensor *`)
/// along `dim` and rotates the blocks of `block` elements there by
/// `scale * shift + offset` (`shift`: an i64 scalar): result block i is
/// joined block (i - that) mod the block count, for the first `count`
/// blocks (0: all). One pass over the result.
fsdp_tensor *fsdp_op_roll(fsdp_program *p, fsdp_type r, fsdp_tensor *shift,
                          int64_t dim, int64_t block, int64_t scale,
                          int64_t offset, int64_t count, int64_t n, ...);
/// Joins `count` tensors (the variadic arguments, each an `fsdp_tensor *`)
/// along `dim` into one new tensor, in one pass.
fsdp_tensor *fsdp_op_concat(fsdp_program *p, fsdp_type r, int64_t dim,
                            int64_t count, ...);
fsdp_tensor *fsdp_op_cast(fsdp_program *p, fsdp_type r, fsdp_tensor *x);
fsdp_tensor *fsdp_op_cross_entropy(fsdp_program *p, fsdp_type r,
                                   fsdp_tensor *logits, fsdp_tensor *labels,
                                   int64_t ignore_index,
                                   fsdp_loss_reduction reduction);
fsdp_tensor *fsdp_op_reduce_max(fsdp_program *p, fsdp_type r, fsdp_tensor *x);
fsdp_tensor *fsdp_op_cross_entropy_combine(
    fsdp_program *p, fsdp_type r, fsdp_tensor *sum_exp, fsdp_tensor *target,
    fsdp_tensor *labels, int64_t ignore_index, fsdp_loss_reduction reduction);
/// This rank's index (an i64 scalar) in the group `axis_mask`.
fsdp_tensor *fsdp_op_axis_index(fsdp_program *p, fsdp_type r,
                                uint32_t axis_mask);
/// This rank's block along `dim` of `x`, which the group holds whole.
fsdp_tensor *fsdp_op_all_slice(fsdp_program *p, fsdp_type r, fsdp_tensor *x,
                               uint32_t axis_mask, int64_t dim);

//===----------------------------------------------------------------------===//
// dist collectives over the group `axis_mask`
//===----------------------------------------------------------------------===//

/// Each collective of Collectives.def, fsdp_op_all_gather(p, r, x,
/// axis_mask, dim), ..., and its asynchronous form, the same arguments
/// giving a future instead of the tensor: fsdp_op_all_gather_start, ...
#define FSDP_UNPARENTHESIZE(...) __VA_ARGS__
#define FSDP_COLLECTIVE(Kind, name, NAME, Traffic, PARAMS, ARGS)               \
  fsdp_tensor *fsdp_op_##name(fsdp_program *p, fsdp_type r,                    \
                              fsdp_tensor *x FSDP_UNPARENTHESIZE PARAMS);      \
  fsdp_future *fsdp_op_##name##_start(                                         \
      fsdp_program *p, fsdp_type r,                                            \
      fsdp_tensor *x FSDP_UNPARENTHESIZE PARAMS);
#include "fsdp/Runtime/Collectives.def"
/// Completes a collective and returns its tensor (consumes the future).
fsdp_tensor *fsdp_wait(fsdp_program *p, fsdp_future *f);

//===----------------------------------------------------------------------===//
// Training steps
//===----------------------------------------------------------------------===//

//===----------------------------------------------------------------------===//
// CPU offload (fsdp-offload)
//===----------------------------------------------------------------------===//

/// Argument `index` (as fsdp_prog_arg counts) lives in host memory: the
/// runtime allocates and counts it there (declared after the argument).
void fsdp_prog_arg_on_host(fsdp_program *p, int64_t index);
/// Ops called from now on, on this thread, put their results in host memory
/// (`host`) or on the device (the default): set around each op fsdp-offload
/// placed on the host. The CPU backend's kernels read either.
void fsdp_prog_placement(fsdp_program *p, bool host);
/// A device copy of `x` (a host tensor), and a host copy of `x`.
fsdp_tensor *fsdp_op_to_device(fsdp_program *p, fsdp_type r, fsdp_tensor *x);
fsdp_tensor *fsdp_op_to_host(fsdp_program *p, fsdp_type r, fsdp_tensor *x);

/// Declares optimizer state `name` (an argument after the parameters,
/// zero-initialized, not saved with the parameters).
void fsdp_prog_state(fsdp_program *p, const char *name, fsdp_type type);
/// After each step, output `output_index` replaces argument `arg_index` (a
/// parameter or state): how a step updates its parameters "in place".
void fsdp_prog_output_update(fsdp_program *p, int64_t output_index,
                             int64_t arg_index);
/// The step's fsdp_op_adamw calls may wait until the step returns, since
/// nothing in the step reads their results: the runtime queues them (with
/// references to their tensors) and runs them together after the step, as
/// one multi-tensor update per group of equal hyperparameters
/// (fsdp_rt_adamw).
void fsdp_prog_defer_updates(fsdp_program *p);
/// CPU offload's optimizer (`fsdp.offload_optimizer = "cpu"`, the
/// default): the optimizer ops and squared sums placed on the host run on
/// the host's cores, queued in stream order (fsdp_rt_host_call), where the
/// backend's kernels do not run on them (CUDA). Without this call they run
/// as backend kernels reading host memory ("gpu").
void fsdp_prog_optimizer_on_host_cores(fsdp_program *p);
/// The model FLOPs of one step on this rank (the cost model's: matmuls and
/// attention, recomputation excluded) and the dtype they run in: MFU on
/// the step line and in --metrics against the peak of that dtype.
void fsdp_prog_model_flops(fsdp_program *p, double flops,
                           fsdp_rt_dtype compute_dtype);
/// The program's forward-only step (fsdp-build-train-step's eval): the
/// step's arguments, the mean loss as output 0, no update. The runtime
/// calls it for --eval-data.
void fsdp_prog_eval_step(fsdp_program *p, void (*eval)(fsdp_program *));
/// The compiler's memory plan of the step: `count` (bytes, offset) pairs in
/// `table`, one per device buffer the step allocates, in the order it
/// allocates them. A buffer with an offset lives at that offset of one
/// arena of `arena_bytes`, which the runtime allocates once, before the
/// first step; offsets are multiples of 256, and a buffer of b bytes takes
/// max(b, 1) rounded up to 256. Offset -1: the step keeps the buffer (an
/// output), which is allocated on its own. The runtime checks every
/// allocation of every step against the plan (its size, and that its slot
/// overlaps no planned buffer still live) and stops naming the allocation
/// when one does not fit.
void fsdp_prog_memory_plan(fsdp_program *p, int64_t arena_bytes, int64_t count,
                           const int64_t *table);

// The ops below write their results into tensors the program created with
// fsdp_tensor_new (results first, then operands), so one call can produce
// several results.

/// The activations' gradients dx = dy · f'(x): fsdp_op_silu_grad, ...
#define FSDP_ACTIVATION(name, forward, gradient)                               \
  void fsdp_op_##name##_grad(fsdp_program *p, fsdp_tensor *dx, fsdp_tensor *x, \
                             fsdp_tensor *dy);
#include "fsdp/Runtime/Activations.def"
void fsdp_op_gelu_grad(fsdp_program *p, fsdp_tensor *dx, fsdp_tensor *x,
                       fsdp_tensor *dy, bool tanh_approximation);
void fsdp_op_rms_norm_grad(fsdp_program *p, fsdp_tensor *dx, fsdp_tensor *dw,
                           fsdp_tensor *x, fsdp_tensor *w, fsdp_tensor *dy,
                           double eps);
void fsdp_op_layer_norm_grad(fsdp_program *p, fsdp_tensor *dx, fsdp_tensor *dw,
                             fsdp_tensor *db, fsdp_tensor *x, fsdp_tensor *w,
                             fsdp_tensor *dy, double eps);
void fsdp_op_attention_grad(fsdp_program *p, fsdp_tensor *dq, fsdp_tensor *dk,
                            fsdp_tensor *dv, fsdp_tensor *q, fsdp_tensor *k,
                            fsdp_tensor *v, fsdp_tensor *out, fsdp_tensor *lse,
                            fsdp_tensor *dout, fsdp_tensor *dlse,
                            fsdp_tensor *positions, fsdp_tensor *key_positions,
                            fsdp_tensor *document_positions, bool causal,
                            int64_t sliding_window, double scale);
void fsdp_op_attention_combine_grad(fsdp_program *p, fsdp_tensor *dout_a,
                                    fsdp_tensor *dlse_a, fsdp_tensor *dout_b,
                                    fsdp_tensor *dlse_b, fsdp_tensor *out_a,
                                    fsdp_tensor *lse_a, fsdp_tensor *out_b,
                                    fsdp_tensor *lse_b, fsdp_tensor *out,
                                    fsdp_tensor *lse, fsdp_tensor *dout,
                                    fsdp_tensor *dlse);
void fsdp_op_softmax_grad(fsdp_program *p, fsdp_tensor *dx, fsdp_tensor *y,
                          fsdp_tensor *dy, int64_t dim);
void fsdp_op_embedding_grad(fsdp_program *p, fsdp_tensor *dtable,
                            fsdp_tensor *ids, fsdp_tensor *dy,
                            fsdp_tensor *shard_index);
void fsdp_op_cross_entropy_partial(fsdp_program *p, fsdp_tensor *sum_exp,
                                   fsdp_tensor *target, fsdp_tensor *logits,
                                   fsdp_tensor *labels, fsdp_tensor *shift,
                                   fsdp_tensor *shard_index,
                                   int64_t ignore_index, int64_t num_classes);
/// `num_classes` > 0: the classes from it on are padding, left out.
void fsdp_op_cross_entropy_partial_grad(
    fsdp_program *p, fsdp_tensor *dlogits, fsdp_tensor *logits,
    fsdp_tensor *labels, fsdp_tensor *shift, fsdp_tensor *shard_index,
    fsdp_tensor *dsum_exp, fsdp_tensor *dtarget, int64_t ignore_index,
    int64_t num_classes);
void fsdp_op_cross_entropy_combine_grad(fsdp_program *p, fsdp_tensor *dsum_exp,
                                        fsdp_tensor *dtarget,
                                        fsdp_tensor *sum_exp,
                                        fsdp_tensor *labels, fsdp_tensor *dloss,
                                        int64_t ignore_index,
                                        fsdp_loss_reduction reduction);
void fsdp_op_cross_entropy_grad(fsdp_program *p, fsdp_tensor *dlogits,
                                fsdp_tensor *logits, fsdp_tensor *labels,
                                fsdp_tensor *dloss, int64_t ignore_index,
                                fsdp_loss_reduction reduction);
void fsdp_op_reduce_sum_to(fsdp_program *p, fsdp_tensor *out, fsdp_tensor *x);
void fsdp_op_pad(fsdp_program *p, fsdp_tensor *out, fsdp_tensor *x, int64_t dim,
                 int64_t before, int64_t after);
void fsdp_op_sum_squares(fsdp_program *p, fsdp_tensor *out, fsdp_tensor *x);
void fsdp_op_div(fsdp_program *p, fsdp_tensor *out, fsdp_tensor *a,
                 fsdp_tensor *b);
void fsdp_op_fill(fsdp_program *p, fsdp_tensor *out, double value);
void fsdp_op_token_count(fsdp_program *p, fsdp_tensor *out, fsdp_tensor *labels,
                         int64_t ignore_index);
void fsdp_op_clip_coefficient(fsdp_program *p, fsdp_tensor *out,
                              fsdp_tensor *sum_of_squares, double max_norm);
void fsdp_op_lr_schedule(fsdp_program *p, fsdp_tensor *out, fsdp_tensor *step,
                         int64_t schedule, int64_t warmup_steps,
                         int64_t total_steps, double min_ratio);
/// `lr_scale` (the schedule's factor) may be NULL: no schedule.
void fsdp_op_adamw(fsdp_program *p, fsdp_tensor *new_param,
                   fsdp_tensor *new_exp_avg, fsdp_tensor *new_exp_avg_sq,
                   fsdp_tensor *param, fsdp_tensor *grad, fsdp_tensor *exp_avg,
                   fsdp_tensor *exp_avg_sq, fsdp_tensor *step,
                   fsdp_tensor *grad_scale, fsdp_tensor *lr_scale, double lr,
                   double beta1, double beta2, double eps, double weight_decay);
void fsdp_op_sgd(fsdp_program *p, fsdp_tensor *new_param,
                 fsdp_tensor *new_momentum_buffer, fsdp_tensor *param,
                 fsdp_tensor *grad, fsdp_tensor *momentum_buffer,
                 fsdp_tensor *step, fsdp_tensor *grad_scale,
                 fsdp_tensor *lr_scale, double lr, double momentum,
                 double weight_decay);

/// Mixture of experts (nn.moe_*, nn.grouped_linear;
/// lib/Runtime/Host/MoEOps.cpp).
void fsdp_op_moe_router(fsdp_program *p, fsdp_tensor *weights,
                        fsdp_tensor *indices, fsdp_tensor *logits,
                        int64_t top_k, bool normalize);
fsdp_tensor *fsdp_op_moe_router_grad(fsdp_program *p, fsdp_type r,
                                     fsdp_tensor *logits, fsdp_tensor *indices,
                                     fsdp_tensor *dweights, bool normalize);
void fsdp_op_moe_permute(fsdp_program *p, fsdp_tensor *rows,
                         fsdp_tensor *counts, fsdp_tensor *x,
                         fsdp_tensor *indices, int64_t num_experts);
/// `weights` may be NULL (the slots are summed).
fsdp_tensor *fsdp_op_moe_unpermute(fsdp_program *p, fsdp_type r,
                                   fsdp_tensor *rows, fsdp_tensor *indices,
                                   fsdp_tensor *weights, int64_t num_experts);
void fsdp_op_moe_unpermute_grad(fsdp_program *p, fsdp_tensor *drows,
                                fsdp_tensor *dweights, fsdp_tensor *rows,
                                fsdp_tensor *indices, fsdp_tensor *weights,
                                fsdp_tensor *dy, int64_t num_experts);
fsdp_tensor *fsdp_op_grouped_linear(fsdp_program *p, fsdp_type r,
                                    fsdp_tensor *x, fsdp_tensor *counts,
                                    fsdp_tensor *w);
void fsdp_op_grouped_linear_grad(fsdp_program *p, fsdp_tensor *dx,
                                 fsdp_tensor *dw, fsdp_tensor *x,
                                 fsdp_tensor *counts, fsdp_tensor *w,
                                 fsdp_tensor *dy);
fsdp_tensor *fsdp_op_moe_rank_counts(fsdp_program *p, fsdp_type r,
                                     fsdp_tensor *counts, int64_t ranks);
fsdp_tensor *fsdp_op_moe_aux_stats(fsdp_program *p, fsdp_type r,
                                   fsdp_tensor *logits, int64_t top_k);
fsdp_tensor *fsdp_op_moe_aux_stats_grad(fsdp_program *p, fsdp_type r,
                                        fsdp_tensor *logits,
                                        fsdp_tensor *dstats);
fsdp_tensor *fsdp_op_moe_aux_combine(fsdp_program *p, fsdp_type r,
                                     fsdp_tensor *stats);
fsdp_tensor *fsdp_op_moe_aux_combine_grad(fsdp_program *p, fsdp_type r,
                                          fsdp_tensor *stats, fsdp_tensor *dy);

//===----------------------------------------------------------------------===//
// Defined by the generated program
//===----------------------------------------------------------------------===//

void fsdp_program_describe(fsdp_program *p);
void fsdp_program_forward(fsdp_program *p);

#endif // FSDP_RUNTIME_PROGRAM_H
