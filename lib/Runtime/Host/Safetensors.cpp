//===- Safetensors.cpp - Loading and saving parameters --------------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The safetensors format: an 8-byte little-endian header length, a JSON
// header {name: {dtype, shape, data_offsets: [begin, end]}} (offsets relative
// to the end of the header), then the raw little-endian data. Tensors are
// read with fseeko/fread by dim-0 row range, so that a rank holding a dim-0
// shard reads only its rows. The host is assumed little-endian.
//
//===----------------------------------------------------------------------===//

#include "Host.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>

using namespace fsdp::host;
using json = nlohmann::json;

namespace {

const char *safetensorsDtype(fsdp_rt_dtype dtype) {
  static const char *names[] = {"F32", "BF16", "F16", "I32", "I64"};
  return names[dtype];
}

struct FileCloser {
  void operator()(FILE *f) const { std::fclose(f); }
};
using File = std::unique_ptr<FILE, FileCloser>;

/// A safetensors file opened for reading: its header and data offset.
struct Reader {
  std::string path;
  File file;
  json header;
  int64_t dataStart = 0;
  int64_t fileSize = 0;

  [[noreturn]] void fail(const std::string &what) const {
    fsdp::host::fail("load", path + ": " + what);
  }

  explicit Reader(const std::string &path) : path(path) {
    file.reset(std::fopen(path.c_str(), "rb"));
    if (!file)
      fail("cannot open for reading");
    fseeko(file.get(), 0, SEEK_END);
    fileSize = int64_t(ftello(file.get()));
    fseeko(file.get(), 0, SEEK_SET);
    unsigned char lenBytes[8];
    if (std::fread(lenBytes, 1, 8, file.get()) != 8)
      fail("too short for a safetensors header");
    uint64_t len = 0;
    for (int i = 7; i >= 0; --i)
      len = (len << 8) | lenBytes[i];
    if (len > uint64_t(fileSize - 8))
      fail("header length " + std::to_string(len) + " exceeds the file");
    std::string text(size_t(len), '\0');
    if (std::fread(text.data(), 1, text.size(), file.get()) != text.size())
      fail("cannot read the header");
    try {
      header = json::parse(text);
    } catch (const json::exception &e) {
      fail(std::string("bad JSON header: ") + e.what());
    }
    if (!header.is_object())
      fail("header is not a JSON object");
    dataStart = 8 + int64_t(len);
  }

  /// Checks that tensor `name` exists with `type` and reads dim-0 rows
  /// [rowBegin, rowEnd) into `out`.
  void readRows(const std::string &name, const fsdp_type &type,
                int64_t rowBegin, int64_t rowEnd, void *out) {
    auto it = header.find(name);
    if (it == header.end())
      fail("parameter '" + name + "' (" + typeString(type) +
           ") is not in the file");
    const json &entry = *it;
    std::string dtype = entry.value("dtype", "");
    std::vector<int64_t> shape;
    int64_t begin = 0, end = 0;
    try {
      shape = entry.at("shape").get<std::vector<int64_t>>();
      auto offsets = entry.at("data_offsets").get<std::vector<int64_t>>();
      if (offsets.size() != 2)
        fail("tensor '" + name + "': data_offsets needs two numbers");
      begin = offsets[0];
      end = offsets[1];
    } catch (const json::exception &e) {
      fail("tensor '" + name + "': " + e.what());
    }
    bool sameShape = int64_t(shape.size()) == type.rank;
    for (int64_t i = 0; sameShape && i < type.rank; ++i)
      sameShape = shape[i] == type.dims[i];
    if (dtype != safetensorsDtype(type.dtype) || !sameShape) {
      std::string found = dtype + "[";
      for (size_t i = 0; i < shape.size(); ++i)
        found += (i ? "x" : "") + std::to_string(shape[i]);
      fail("tensor '" + name + "' is " + found + "], the program expects " +
           typeString(type));
    }
    int64_t bytes = byteSize(type);
    if (end - begin != bytes || begin < 0 || dataStart + end > fileSize)
      fail("tensor '" + name + "': data_offsets [" + std::to_string(begin) +
           ", " + std::to_string(end) + ") do not hold " +
           std::to_string(bytes) + " bytes inside the file");
    int64_t rows = type.rank ? type.dims[0] : 1;
    int64_t rowBytes = rows ? bytes / rows : 0;
    int64_t want = (rowEnd - rowBegin) * rowBytes;
    if (fseeko(file.get(), off_t(dataStart + begin + rowBegin * rowBytes),
               SEEK_SET) != 0 ||
        std::fread(out, 1, size_t(want), file.get()) != size_t(want))
      fail("cannot read tensor '" + name + "'");
  }
};

} // namespace

void fsdp::host::loadParams(fsdp_program &p, const std::string &path) {
  for (const Param &param : p.params)
    if (!param.globalDims.empty())
      fail("load", path + ": parameter '" + param.name +
                       "' is sharded; loading shards is not supported yet");
  Reader reader(path);
  for (Param &param : p.params) {
    param.tensor = newTensor(param.type);
    param.tensor->borrowed = true;
    if (param.state)
      continue; // optimizer state starts at zero
    // Every rank reads the whole tensor today; an FSDP shard will pass its
    // own dim-0 row range.
    int64_t rows = param.type.rank ? param.type.dims[0] : 1;
    std::vector<char> image(size_t(byteSize(param.type)));
    reader.readRows(param.name, param.type, 0, rows, image.data());
    upload(param.tensor, image.data());
  }
}

void fsdp::host::saveParams(const fsdp_program &p, const std::string &path) {
  for (const Param &param : p.params)
    if (!param.globalDims.empty())
      fail("save", path + ": parameter '" + param.name +
                       "' is sharded; saving shards is not supported yet");
  json header = json::object();
  header["__metadata__"] = {{"format", "pt"}};
  int64_t offset = 0;
  for (const Param &param : p.params) {
    if (param.state)
      continue;
    int64_t bytes = byteSize(param.type);
    header[param.name] = {
        {"dtype", safetensorsDtype(param.type.dtype)},
        {"shape", std::vector<int64_t>(param.type.dims,
                                       param.type.dims + param.type.rank)},
        {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  // Pad with spaces so that the data starts 8-byte aligned.
  text.append((8 - text.size() % 8) % 8, ' ');
  File file(std::fopen(path.c_str(), "wb"));
  if (!file)
    fail("save", path + ": cannot open for writing");
  unsigned char lenBytes[8];
  uint64_t len = text.size();
  for (int i = 0; i < 8; ++i)
    lenBytes[i] = uint8_t(len >> (8 * i));
  bool ok = std::fwrite(lenBytes, 1, 8, file.get()) == 8 &&
            std::fwrite(text.data(), 1, text.size(), file.get()) == text.size();
  for (const Param &param : p.params) {
    if (param.state)
      continue;
    std::vector<char> image = download(param.tensor);
    ok = ok &&
         std::fwrite(image.data(), 1, image.size(), file.get()) == image.size();
  }
  if (!ok || std::fflush(file.get()) != 0)
    fail("save", path + ": write failed");
}
