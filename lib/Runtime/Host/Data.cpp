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

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <tuple>

using namespace fsdp::host;

namespace {

/// The 1-based step count a training step's optimizer reads (an f32 scalar).
const char *const kOptimizerStep = "optimizer_step";

/// Context parallelism's input for packed rows: each token's index in its
/// row, which position_ids (positions in documents) no longer give.
const char *const kTokenIndex = "token_index";

bool isTokenInput(const std::string &name) {
  return name == "input_ids" || name == "labels" || name == "position_ids" ||
         name == kTokenIndex;
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
/// `index` and 2·parts−1−index; over `rounds` rounds, those of each round.
struct SequenceSplit {
  int64_t parts = 1, index = 0, rounds = 1;
  /// The position in the whole sequence of local position `s` of `seq`.
  int64_t global(int64_t s, int64_t seq) const {
    if (parts == 1)
      return s;
    int64_t chunk = seq / (2 * rounds), local = s / chunk;
    int64_t round = local / 2, second = local % 2;
    int64_t within = second ? 2 * parts - 1 - index : index;
    return (round * 2 * parts + within) * chunk + s % chunk;
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
  for (const Input &in : p.inputs)
    if (isTokenInput(in.name) && in.sequenceAxes)
      split.rounds = in.sequenceRounds;
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

namespace {
/// Whether the program's position_ids are positions in documents.
bool packedProgram(const fsdp_program &p) {
  for (const Input &in : p.inputs)
    if (in.documents)
      return true;
  return false;
}

/// The label that does not count, as the program's loss declares it.
int64_t ignoredLabel(const fsdp_program &p) {
  for (const Input &in : p.inputs)
    if (in.name == "labels" && in.ignore)
      return *in.ignore;
  return -100;
}

/// Why the documents options do not fit the program, or "".
std::string documentsError(const fsdp_program &p, const DataOptions &options) {
  if (options.pack && !options.eos)
    return "--pack needs --eos ID (the token that ends each document)";
  if (options.eos && options.path.empty())
    return "--eos needs --data TOKENS.bin";
  if (options.eos && !packedProgram(p))
    return "--eos: the program's attention is not packed, so documents in a "
           "row would attend to each other; compile a packed graph "
           "(fsdp-graphgen --packed, fsdp_mlir.export(..., packed=True))";
  return "";
}
} // namespace

void fsdp::host::checkTokenFile(fsdp_program &p, const DataOptions &options) {
  BatchShape shape = batchShape(p);
  std::string error = documentsError(p, options);
  if (error.empty() && (options.path.empty() || !shape.batch))
    return;
  int64_t high = tokenRange(p, 0);
  if (error.empty() && options.eos &&
      (*options.eos < 0 || (high && *options.eos >= high)))
    error = "--eos " + std::to_string(*options.eos) +
            " is outside the vocabulary [0, " +
            (high ? std::to_string(high) : "inf") + ")";
  // The whole file is checked once, before the first step, by rank 0: a
  // bad token found hours into a run costs the run.
  if (p.worldRank == 0 && error.empty()) {
    FILE *f = std::fopen(options.path.c_str(), "rb");
    int64_t bytes = 0;
    if (f) {
      fseeko(f, 0, SEEK_END);
      bytes = int64_t(ftello(f));
      fseeko(f, 0, SEEK_SET);
    }
    int64_t tokens = bytes / 4, batch = globalBatch(p);
    int64_t need = batch * (shape.seq * sequenceSplit(p).parts + 1) + 1;
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

namespace {
/// One sample's whole sequence (S tokens): its inputs, labels and each
/// token's position in its document.
struct Sample {
  std::vector<int64_t> ids, labels, positions;
  explicit Sample(int64_t seq)
      : ids(size_t(seq)), labels(size_t(seq)), positions(size_t(seq)) {}
  /// Inputs t[0:S] and labels t[1:S+1] of S + 1 tokens, one document (or,
  /// with an end-of-document token, documents ending with it: positions
  /// restart after it, and its label, the next document's first token, is
  /// ignored).
  void fromStream(const std::vector<int64_t> &tokens,
                  std::optional<int64_t> eos, int64_t ignore) {
    int64_t at = 0;
    for (size_t s = 0; s < ids.size(); ++s) {
      ids[s] = tokens[s];
      bool ends = eos && tokens[s] == *eos;
      labels[s] = ends ? ignore : tokens[s + 1];
      positions[s] = at;
      at = ends ? 0 : at + 1;
    }
  }
};

/// Whole documents packed into rows of S tokens, best fit decreasing over
/// each window of kWindow documents in file order: a document (its tokens
/// up to and including the end-of-document token; cut to S if longer) goes
/// to the open row with the least room that holds it, else to a new row;
/// then the window's rows are shuffled (seeded by the window).
/// Rows end with padding (the end-of-document token, labels ignored, a
/// document of its own).
struct Packing {
  struct Document {
    int64_t offset, length;
  };
  std::vector<std::vector<Document>> rows;
  int64_t documents = 0, tokens = 0, cut = 0;
};

constexpr size_t kWindow = 1024;

Packing packDocuments(const std::string &path, int64_t seq, int64_t eos) {
  int64_t count = 0;
  FILE *f = openTokens(path, count);
  fseeko(f, 0, SEEK_SET);
  std::vector<Packing::Document> docs;
  std::vector<int32_t> chunk(1 << 16);
  int64_t start = 0, at = 0;
  for (size_t n; (n = std::fread(chunk.data(), 4, chunk.size(), f)) > 0;)
    for (size_t k = 0; k < n; ++k, ++at)
      if (chunk[k] == eos) {
        docs.push_back({start, at + 1 - start});
        start = at + 1;
      }
  std::fclose(f);
  if (start < count)
    docs.push_back({start, count - start});
  Packing packing;
  packing.documents = int64_t(docs.size());
  for (size_t w = 0; w < docs.size(); w += kWindow) {
    std::vector<Packing::Document> window(
        docs.begin() + long(w),
        docs.begin() + long(std::min(docs.size(), w + kWindow)));
    std::stable_sort(
        window.begin(), window.end(),
        [](const Packing::Document &a, const Packing::Document &b) {
          return a.length > b.length;
        });
    size_t first = packing.rows.size();
    std::vector<int64_t> room;
    for (Packing::Document doc : window) {
      if (doc.length > seq) {
        doc.length = seq;
        ++packing.cut;
      }
      packing.tokens += doc.length;
      size_t best = room.size();
      for (size_t r = 0; r < room.size(); ++r)
        if (room[r] >= doc.length &&
            (best == room.size() || room[r] < room[best]))
          best = r;
      if (best == room.size()) {
        room.push_back(seq);
        packing.rows.emplace_back();
      }
      room[best] -= doc.length;
      packing.rows[first + best].push_back(doc);
    }
    // Best fit decreasing fills the window's first rows with its longest
    // documents: shuffle the window's rows (the same way on every rank) so
    // that a batch mixes long and short ones.
    uint64_t key = splitmix64(uint64_t(w));
    for (size_t r = packing.rows.size() - 1; r > first; --r) {
      key = splitmix64(key);
      size_t other = first + size_t(key % uint64_t(r - first + 1));
      std::swap(packing.rows[r], packing.rows[other]);
    }
  }
  return packing;
}

/// The packing of `path` into rows of `seq` tokens, computed once; rank 0
/// says how full the rows are.
const Packing &packingOf(const fsdp_program &p, const std::string &path,
                         int64_t seq, int64_t eos) {
  static std::map<std::tuple<std::string, int64_t, int64_t>, Packing> cache;
  auto key = std::make_tuple(path, seq, eos);
  auto it = cache.find(key);
  if (it != cache.end())
    return it->second;
  it = cache.emplace(key, packDocuments(path, seq, eos)).first;
  const Packing &packing = it->second;
  int64_t slots = int64_t(packing.rows.size()) * seq;
  if (p.worldRank == 0)
    std::fprintf(stderr,
                 "data: %s: %lld documents (%lld cut to %lld tokens) packed "
                 "into %lld rows, %.1f%% of their tokens documents'\n",
                 path.c_str(), (long long)packing.documents,
                 (long long)packing.cut, (long long)seq,
                 (long long)packing.rows.size(),
                 slots ? 100.0 * double(packing.tokens) / double(slots) : 0.0);
  return packing;
}

/// Row `row` of a packing (modulo the rows), read from `file`.
void packedSample(FILE *file, const std::string &path, const Packing &packing,
                  int64_t row, int64_t eos, int64_t ignore, Sample &sample) {
  if (packing.rows.empty())
    fail("data", path + ": no document to pack");
  const auto &docs = packing.rows[size_t(row % int64_t(packing.rows.size()))];
  std::vector<int32_t> raw;
  size_t s = 0;
  for (const Packing::Document &doc : docs) {
    raw.resize(size_t(doc.length));
    if (fseeko(file, off_t(doc.offset * 4), SEEK_SET) != 0 ||
        std::fread(raw.data(), 4, raw.size(), file) != raw.size())
      fail("data",
           path + ": cannot read tokens at " + std::to_string(doc.offset));
    for (size_t k = 0; k < raw.size(); ++k, ++s) {
      sample.ids[s] = raw[k];
      sample.labels[s] = k + 1 < raw.size() ? raw[k + 1] : ignore;
      sample.positions[s] = int64_t(k);
    }
  }
  for (int64_t k = 0; s < sample.ids.size(); ++s, ++k) {
    sample.ids[s] = eos;
    sample.labels[s] = ignore;
    sample.positions[s] = k;
  }
}
} // namespace

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
  fsdp_tensor *ids = nullptr, *labels = nullptr, *positions = nullptr,
              *tokenIndex = nullptr;
  for (Input &in : p.inputs) {
    if (in.name == "input_ids")
      ids = in.tensor;
    else if (in.name == "labels")
      labels = in.tensor;
    else if (in.name == "position_ids")
      positions = in.tensor;
    else if (in.name == kTokenIndex)
      tokenIndex = in.tensor;
  }
  HostImage idsImage(ids), labelsImage(labels), positionsImage(positions),
      indexImage(tokenIndex);
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
  int64_t ignore = ignoredLabel(p);
  bool packed = packedProgram(p);
  const Packing *packing =
      options.pack ? &packingOf(p, options.path, seq, *options.eos) : nullptr;
  Sample sample(seq);
  for (int64_t b = 0; b < batch; ++b) {
    // Index of this sample in the whole run's sequence of samples.
    int64_t sampleIndex = step * global + first + b;
    if (packing) {
      packedSample(file, options.path, *packing, sampleIndex, *options.eos,
                   ignore, sample);
    } else if (file) {
      int64_t offset = (sampleIndex * (seq + 1)) % (numTokens - seq - 1);
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
      sample.fromStream(tokens, options.eos, ignore);
    } else {
      uint64_t key =
          splitmix64(splitmix64(splitmix64(options.seed) ^ uint64_t(step)) ^
                     uint64_t(first + b));
      for (int64_t s = 0; s <= seq; ++s)
        tokens[s] = int64_t(splitmix64(key ^ uint64_t(s)) % uint64_t(high));
      sample.fromStream(tokens, std::nullopt, ignore);
    }
    for (int64_t s = 0; s < localSeq; ++s) {
      int64_t at = chunks.global(s, localSeq);
      idsImage.store(b * localSeq + s, sample.ids[at]);
      labelsImage.store(b * localSeq + s, sample.labels[at]);
      // An unpacked program's positions are the tokens' places in the row.
      positionsImage.store(b * localSeq + s,
                           packed ? sample.positions[at] : at);
      indexImage.store(b * localSeq + s, at);
    }
  }
  if (file)
    std::fclose(file);
  idsImage.upload();
  labelsImage.upload();
  positionsImage.upload();
  indexImage.upload();
}
