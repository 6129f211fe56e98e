//===- Safetensors.h - Reading and writing safetensors files ----*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The safetensors format: an 8-byte little-endian header length, a JSON
// header {name: {dtype, shape, data_offsets: [begin, end]}} (offsets relative
// to the end of the header), then the raw little-endian data. The host is
// assumed little-endian.
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_LIB_RUNTIME_HOST_SAFETENSORS_H
#define FSDP_LIB_RUNTIME_HOST_SAFETENSORS_H

#include "Host.h"

#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace fsdp::host {

/// One tensor of a safetensors header.
struct TensorEntry {
  fsdp_rt_dtype dtype;
  std::vector<int64_t> shape;
  /// Byte offsets of the data, relative to the end of the header.
  int64_t begin = 0, end = 0;
};

/// Whether `path` exists.
bool pathExists(const std::string &path);
/// Whether `path` is a directory.
bool isDirectory(const std::string &path);
/// Appends the whole file `path` to `text`; false if it cannot be opened.
bool readText(const std::string &path, std::string &text);

/// `BF16[3x4]`, for messages.
std::string entryString(const TensorEntry &entry);

/// A safetensors file opened for reading, its header checked whole: every
/// entry an object with a known dtype, a shape and offsets that hold exactly
/// its bytes inside the file. Errors name the file and the tensor.
class SafetensorsFile {
public:
  /// Opens `path`; on failure returns nullopt and sets `error`.
  static std::unique_ptr<SafetensorsFile> open(const std::string &path,
                                               std::string &error);

  const std::string &path() const { return filePath; }
  const std::map<std::string, TensorEntry> &entries() const { return tensors; }

  /// Reads `count` elements of `entry` from flat index `first`, converting
  /// them to `dtype` (floats to floats, integers only to themselves), into
  /// `out`. Returns false, with `error` set, if the read fails.
  bool read(const std::string &name, const TensorEntry &entry, int64_t first,
            int64_t count, fsdp_rt_dtype dtype, char *out,
            std::string &error) const;

private:
  struct Closer {
    void operator()(FILE *f) const { std::fclose(f); }
  };
  std::string filePath;
  std::unique_ptr<FILE, Closer> file;
  int64_t dataStart = 0;
  std::map<std::string, TensorEntry> tensors;
};

/// Whether a tensor stored as `stored` can be read as `wanted`.
bool convertible(fsdp_rt_dtype stored, fsdp_rt_dtype wanted);

/// One tensor to write: its name, type and bytes (`type`'s size).
struct TensorImage {
  std::string name;
  fsdp_type type;
  std::vector<char> bytes;
};
/// Writes `tensors` to `path` and fsyncs it; returns false, with `error`
/// set, on any failure (a full disk included).
bool writeSafetensors(const std::string &path,
                      const std::vector<TensorImage> &tensors,
                      std::string &error);
/// Writes the header of a file of `types` (in order) and returns the open
/// file positioned at the data, for writing tensor by tensor; null, with
/// `error` set, on failure.
FILE *
startSafetensors(const std::string &path,
                 const std::vector<std::pair<std::string, fsdp_type>> &types,
                 std::string &error);
/// Flushes, fsyncs and closes a file from startSafetensors.
bool finishFile(FILE *file, const std::string &path, std::string &error);

} // namespace fsdp::host

#endif // FSDP_LIB_RUNTIME_HOST_SAFETENSORS_H
