//===- Data.cpp - The step's data inputs ----------------------------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// `input_ids`, `labels` and `position_ids` ([B, S] integers) are filled each
// step from one token sequence per sample: S + 1 tokens t, input_ids = t[0:S],
// labels = t[1:S+1], position_ids = 0..S-1. The tokens are synthetic (a
// counter-based generator keyed by seed, step and sample) or read from a file
// of little-endian int32 tokens.
//
// A data-parallel program (fsdp_prog_input_split) fills only this rank's
// samples: sample b of the local batch is sample b + k·B of the global one,
// where k is the rank's block over the split axes, so N ranks see exactly
// the batch one rank of the global size would. A context-parallel one
// (fsdp_prog_input_sequence_split) fills only its chunks of each sequence,
// with their global positions in position_ids.
//
//===----------------------------------------------------------------------===//

#include "Host.h"

#include <cstdio>
#include <limits>
#include <optional>

using namespace fsdp::host;

namespace {

/// The 1-based step count a training step's optimizer reads (an f32 scalar).
const char *const kOptimizerStep = "optimizer_step";

bool isTokenInput(const std::string &name) {
  return name == "input_ids" || name == "labels" || name == "position_ids";
}

/// The [B, S] shape all token inputs share.
struct BatchShape {
  int64_t batch = 0, seq = 0;
};

BatchShape batchShape(const fsdp_program &p) {
  BatchShape shape;
  for (const Input &in : p.inputs) {
    if (!isTokenInput(in.name))
      continue;
    if (in.type.rank != 2 ||
        (in.type.dtype != FSDP_RT_I32 && in.type.dtype != FSDP_RT_I64))
      fail("data", "input '" + in.name + "' is " + typeString(in.type) +
                       ", expected i32 or i64 [B, S]");
    if (shape.batch &&
        (shape.batch != in.type.dims[0] || shape.seq != in.type.dims[1]))
      fail("data", "input '" + in.name + "' is " + typeString(in.type) +
                       " but another token input is [" +
                       std::to_string(shape.batch) + ", " +
                       std::to_string(shape.seq) + "]");
    shape.batch = in.type.dims[0];
    shape.seq = in.type.dims[1];
  }
  return shape;
}

/// Context parallelism: the sequence's split over the ranks of the token
/// inputs' sequence axes, 2·parts chunks of which this rank holds chunks
/// `index` and 2·parts−1−index.
struct SequenceSplit {
  int64_t parts = 1, index = 0;
  /// The position in the whole sequence of local position `s` of `seq`.
  int64_t global(int64_t s, int64_t seq) const {
    if (parts == 1)
      return s;
    int64_t chunk = seq / 2;
    return s < chunk ? index * chunk + s
                     : (2 * parts - 1 - index) * chunk + (s - chunk);
  }
};

SequenceSplit sequenceSplit(const fsdp_program &p) {
  std::optional<uint32_t> mask;
  for (const Input &in : p.inputs) {
    if (!isTokenInput(in.name))
      continue;
    if (mask && *mask != in.sequenceAxes)
      fail("data", "input '" + in.name +
                       "' splits its sequence over other axes than another "
                       "token input");
    mask = in.sequenceAxes;
  }
  SequenceSplit split;
  std::vector<int> axes;
  for (size_t i = 0; i < p.axes.size(); ++i)
    if (mask.value_or(0) >> i & 1) {
      axes.push_back(int(i));
      split.parts *= p.axes[i].size;
    }
  split.index = blockIndex(p, axes);
  return split;
}

/// Upper bound of the token ids: the tightest declared range of input_ids
/// and labels; `fallback` if neither has one.
int64_t tokenRange(const fsdp_program &p, int64_t fallback) {
  int64_t high = std::numeric_limits<int64_t>::max();
  bool declared = false;
  for (const char *name : {"input_ids", "labels"}) {
    auto it = p.inputRanges.find(name);
    if (it != p.inputRanges.end()) {
      high = std::min(high, it->second);
      declared = true;
    }
  }
  return declared ? high : fallback;
}

/// Opens the token file; `count` is its number of int32 tokens.
FILE *openTokens(const std::string &path, int64_t &count) {
  FILE *f = std::fopen(path.c_str(), "rb");
  if (!f)
    fail("data", path + ": cannot open for reading");
  fseeko(f, 0, SEEK_END);
  count = int64_t(ftello(f)) / 4;
  return f;
}

/// A host image of an integer input, written element by element and then
/// uploaded in one copy.
struct HostImage {
  explicit HostImage(fsdp_tensor *t)
      : tensor(t), bytes(t ? size_t(fsdp::host::byteSize(t->type)) : 0) {}
  void store(int64_t i, int64_t v) {
    if (!tensor)
      return;
    if (tensor->type.dtype == FSDP_RT_I32)
      reinterpret_cast<int32_t *>(bytes.data())[i] = int32_t(v);
    else
      reinterpret_cast<int64_t *>(bytes.data())[i] = v;
  }
  void upload() {
    if (tensor)
      fsdp::host::upload(tensor, bytes.data());
  }
  fsdp_tensor *tensor;
  std::vector<char> bytes;
};

} // namespace

int64_t fsdp::host::globalBatch(const fsdp_program &p) {
  // As fillInputs places samples: the local batch over every axis that
  // splits a token input.
  uint32_t splitAxes = 0;
  for (const Input &in : p.inputs)
    if (isTokenInput(in.name))
      splitAxes |= in.batchAxes;
  int64_t batch = batchShape(p).batch;
  for (size_t i = 0; i < p.axes.size(); ++i)
    if (splitAxes >> i & 1)
      batch *= p.axes[i].size;
  return batch;
}

void fsdp::host::prepareInputs(fsdp_program &p, const DataOptions &options) {
  for (Input &in : p.inputs) {
    in.tensor = newTensor(in.type, in.host);
    in.tensor->borrowed = true;
    if (!isTokenInput(in.name) && in.name != kOptimizerStep && p.worldRank == 0)
      std::fprintf(stderr,
                   "warning: input '%s' is not input_ids, labels or "
                   "position_ids; it is zero-filled\n",
                   in.name.c_str());
  }
  checkTokenFile(p, options);
}

void fsdp::host::checkTokenFile(fsdp_program &p, const DataOptions &options) {
  BatchShape shape = batchShape(p);
  if (options.path.empty() || !shape.batch)
    return;
  // The whole file is checked once, before the first step, by rank 0: a
  // bad token found hours into a run costs the run.
  std::string error;
  if (p.worldRank == 0) {
    FILE *f = std::fopen(options.path.c_str(), "rb");
    int64_t bytes = 0;
    if (f) {
      fseeko(f, 0, SEEK_END);
      bytes = int64_t(ftello(f));
      fseeko(f, 0, SEEK_SET);
    }
    int64_t tokens = bytes / 4, batch = globalBatch(p);
    int64_t need = batch * (shape.seq * sequenceSplit(p).parts + 1) + 1;
    int64_t high = tokenRange(p, 0);
    if (!f) {
      error = options.path + ": cannot open for reading";
    } else if (bytes % 4 != 0) {
      error = options.path + ": " + std::to_string(bytes) +
              " bytes is not a whole number of little-endian int32 tokens";
    } else if (tokens < need) {
      error = options.path + ": " + std::to_string(tokens) +
              " tokens, fewer than one global batch needs (" +
              std::to_string(batch) + " sequences of " +
              std::to_string(shape.seq) + " + 1 tokens, and one more)";
    } else {
      std::vector<int32_t> chunk(1 << 16);
      int64_t at = 0;
      for (size_t n; error.empty() &&
                     (n = std::fread(chunk.data(), 4, chunk.size(), f)) > 0;
           at += int64_t(n))
        for (size_t k = 0; k < n; ++k)
          if (chunk[k] < 0 || (high && chunk[k] >= high)) {
            error = options.path + ": token " + std::to_string(chunk[k]) +
                    " at position " + std::to_string(at + int64_t(k)) +
                    " is outside the vocabulary [0, " +
                    (high ? std::to_string(high) : "inf") + ")";
            break;
          }
    }
    if (f)
      std::fclose(f);
  }
  int64_t length = int64_t(error.size());
  MPI_Bcast(&length, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
  if (length)
    failAll(p, "data", error);
}

void fsdp::host::fillInputs(fsdp_program &p, const DataOptions &options,
                            int64_t step) {
  for (Input &in : p.inputs)
    if (in.name == kOptimizerStep) {
      if (in.type.dtype != FSDP_RT_F32 || in.type.rank != 0)
        fail("data", std::string(kOptimizerStep) + " is " +
                         typeString(in.type) + ", expected an f32 scalar");
      float count = float(step + 1);
      upload(in.tensor, &count);
    }
  BatchShape shape = batchShape(p);
  if (!shape.batch)
    return;
  int64_t batch = shape.batch, seq = shape.seq;
  fsdp_tensor *ids = nullptr, *labels = nullptr, *positions = nullptr;
  for (Input &in : p.inputs) {
    if (in.name == "input_ids")
      ids = in.tensor;
    else if (in.name == "labels")
      labels = in.tensor;
    else if (in.name == "position_ids")
      positions = in.tensor;
  }
  HostImage idsImage(ids), labelsImage(labels), positionsImage(positions);
  // This rank's block of the global batch.
  uint32_t splitAxes = 0;
  for (Input &in : p.inputs)
    if (isTokenInput(in.name))
      splitAxes |= in.batchAxes;
  std::vector<int> axes;
  int64_t blocks = 1;
  for (size_t i = 0; i < p.axes.size(); ++i)
    if (splitAxes >> i & 1) {
      axes.push_back(int(i));
      blocks *= p.axes[i].size;
    }
  int64_t first = blockIndex(p, axes) * batch, global = batch * blocks;
  // Each sample is the whole sequence; the rank keeps its chunks of it.
  SequenceSplit chunks = sequenceSplit(p);
  int64_t localSeq = seq;
  seq *= chunks.parts;
  std::vector<int64_t> tokens(size_t(seq + 1));
  std::vector<int32_t> raw(size_t(seq + 1));
  FILE *file = nullptr;
  int64_t numTokens = 0;
  if (!options.path.empty())
    file = openTokens(options.path, numTokens);
  int64_t high = tokenRange(p, file ? 0 : 2);
  for (int64_t b = 0; b < batch; ++b) {
    // Index of this sample in the whole run's sequence of samples.
    int64_t sample = step * global + first + b;
    if (file) {
      int64_t offset = (sample * (seq + 1)) % (numTokens - seq - 1);
      if (fseeko(file, off_t(offset * 4), SEEK_SET) != 0 ||
          std::fread(raw.data(), 4, raw.size(), file) != raw.size())
        fail("data", options.path + ": cannot read tokens at " +
                         std::to_string(offset));
      for (int64_t s = 0; s <= seq; ++s) {
        tokens[s] = raw[s];
        if (tokens[s] < 0 || (high && tokens[s] >= high))
          fail("data", options.path + ": token " + std::to_string(tokens[s]) +
                           " at position " + std::to_string(offset + s) +
                           " is outside [0, " +
                           (high ? std::to_string(high) : "inf") + ")");
      }
    } else {
      uint64_t key =
          splitmix64(splitmix64(splitmix64(options.seed) ^ uint64_t(step)) ^
                     uint64_t(first + b));
      for (int64_t s = 0; s <= seq; ++s)
        tokens[s] = int64_t(splitmix64(key ^ uint64_t(s)) % uint64_t(high));
    }
    for (int64_t s = 0; s < localSeq; ++s) {
      int64_t at = chunks.global(s, localSeq);
      idsImage.store(b * localSeq + s, tokens[at]);
      labelsImage.store(b * localSeq + s, tokens[at + 1]);
      positionsImage.store(b * localSeq + s, at);
    }
  }
  if (file)
    std::fclose(file);
  idsImage.upload();
  labelsImage.upload();
  positionsImage.upload();
}
