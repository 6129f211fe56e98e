//===- Safetensors.cpp - Safetensors files and Hugging Face weights -------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// Reading checks the whole header before any data is read, so a malformed
// file is one clear error on every rank. Loading Hugging Face weights reads,
// on each rank, only the runs of its own blocks (Layout.cpp): rows, column
// blocks, strided groups; FSDP's padding stays zero. 16-bit files convert to
// the program's (f32 master) dtype.
//
//===----------------------------------------------------------------------===//

#include "Safetensors.h"

#include "../Common/Float.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <sys/stat.h>
#include <unistd.h>

using namespace fsdp::host;
using json = nlohmann::json;

namespace {

const char *const kDtypeNames[] = {"F32", "BF16", "F16", "I32", "I64"};

std::optional<fsdp_rt_dtype> parseDtype(const std::string &name) {
  for (int i = 0; i <= FSDP_RT_I64; ++i)
    if (name == kDtypeNames[i])
      return fsdp_rt_dtype(i);
  return std::nullopt;
}

bool isFloat(fsdp_rt_dtype dtype) { return dtype <= FSDP_RT_F16; }

std::string shapeString(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? "x" : "") + std::to_string(shape[i]);
  return s + "]";
}

} // namespace

bool fsdp::host::pathExists(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

bool fsdp::host::isDirectory(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool fsdp::host::readText(const std::string &path, std::string &text) {
  FILE *f = std::fopen(path.c_str(), "rb");
  if (!f)
    return false;
  char buffer[65536];
  for (size_t n; (n = std::fread(buffer, 1, sizeof(buffer), f)) > 0;)
    text.append(buffer, n);
  std::fclose(f);
  return true;
}

std::string fsdp::host::entryString(const TensorEntry &entry) {
  return kDtypeNames[entry.dtype] + shapeString(entry.shape);
}

bool fsdp::host::convertible(fsdp_rt_dtype stored, fsdp_rt_dtype wanted) {
  return stored == wanted || (isFloat(stored) && isFloat(wanted));
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::string &path,
                                                       std::string &error) {
  auto fail = [&](const std::string &what) {
    error = path + ": " + what;
    return nullptr;
  };
  auto f = std::unique_ptr<SafetensorsFile>(new SafetensorsFile);
  f->filePath = path;
  f->file.reset(std::fopen(path.c_str(), "rb"));
  if (!f->file)
    return fail(std::string("cannot open for reading: ") +
                std::strerror(errno));
  fseeko(f->file.get(), 0, SEEK_END);
  int64_t fileSize = int64_t(ftello(f->file.get()));
  fseeko(f->file.get(), 0, SEEK_SET);
  unsigned char lenBytes[8];
  if (fileSize < 8 || std::fread(lenBytes, 1, 8, f->file.get()) != 8)
    return fail("too short for a safetensors header");
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i)
    len = (len << 8) | lenBytes[i];
  if (len > uint64_t(fileSize - 8))
    return fail("header length " + std::to_string(len) + " exceeds the file");
  std::string text(size_t(len), '\0');
  if (std::fread(text.data(), 1, text.size(), f->file.get()) != text.size())
    return fail("cannot read the header");
  json header = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded())
    return fail("the header is not valid JSON");
  if (!header.is_object())
    return fail("the header is not a JSON object");
  f->dataStart = 8 + int64_t(len);
  int64_t dataSize = fileSize - f->dataStart;
  for (auto &[name, value] : header.items()) {
    if (name == "__metadata__")
      continue;
    std::string where = "tensor '" + name + "': ";
    if (!value.is_object())
      return fail(where + "expected an object, got " + value.dump());
    auto dtype = value.find("dtype");
    if (dtype == value.end() || !dtype->is_string())
      return fail(where + "'dtype' must be a string");
    std::optional<fsdp_rt_dtype> parsed = parseDtype(dtype->get<std::string>());
    if (!parsed)
      return fail(where + "dtype " + dtype->dump() +
                  " is not one of F32, BF16, F16, I32, I64");
    TensorEntry entry{*parsed, {}, 0, 0};
    auto shape = value.find("shape");
    if (shape == value.end() || !shape->is_array())
      return fail(where + "'shape' must be an array of sizes");
    int64_t elements = 1;
    for (const json &d : *shape) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t(1) << 48))
        return fail(where + "'shape' must be an array of sizes, got " +
                    shape->dump());
      entry.shape.push_back(d.get<int64_t>());
      elements *= entry.shape.back();
      if (elements > (int64_t(1) << 56))
        return fail(where + "shape " + shape->dump() + " is too large");
    }
    auto offsets = value.find("data_offsets");
    if (offsets == value.end() || !offsets->is_array() ||
        offsets->size() != 2 || !(*offsets)[0].is_number_unsigned() ||
        !(*offsets)[1].is_number_unsigned())
      return fail(where + "'data_offsets' must be two byte offsets");
    entry.begin = (*offsets)[0].get<int64_t>();
    entry.end = (*offsets)[1].get<int64_t>();
    int64_t bytes = elements * int64_t(fsdp_rt_dtype_size(entry.dtype));
    if (entry.begin < 0 || entry.end - entry.begin != bytes ||
        entry.end > dataSize)
      return fail(where + "data_offsets [" + std::to_string(entry.begin) +
                  ", " + std::to_string(entry.end) + ") do not hold its " +
                  std::to_string(bytes) + " bytes inside the file's " +
                  std::to_string(dataSize));
    f->tensors[name] = entry;
  }
  return f;
}

bool SafetensorsFile::read(const std::string &name, const TensorEntry &entry,
                           int64_t first, int64_t count, fsdp_rt_dtype dtype,
                           char *out, std::string &error) const {
  size_t esize = fsdp_rt_dtype_size(entry.dtype);
  std::vector<char> raw;
  char *dst = out;
  if (entry.dtype != dtype) {
    raw.resize(size_t(count) * esize);
    dst = raw.data();
  }
  if (fseeko(file.get(), off_t(dataStart + entry.begin + first * esize),
             SEEK_SET) != 0 ||
      std::fread(dst, esize, size_t(count), file.get()) != size_t(count)) {
    error = filePath + ": cannot read tensor '" + name + "'";
    return false;
  }
  if (entry.dtype != dtype) {
    std::vector<float> wide(static_cast<size_t>(count));
    fsdp::rt::toFloat(entry.dtype, raw.data(), count, wide.data());
    fsdp::rt::fromFloat(dtype, wide.data(), count, out);
  }
  return true;
}

FILE *fsdp::host::startSafetensors(
    const std::string &path,
    const std::vector<std::pair<std::string, fsdp_type>> &types,
    std::string &error) {
  json header = json::object();
  header["__metadata__"] = {{"format", "pt"}};
  int64_t offset = 0;
  for (const auto &[name, type] : types) {
    int64_t bytes = byteSize(type);
    header[name] = {
        {"dtype", kDtypeNames[type.dtype]},
        {"shape", std::vector<int64_t>(type.dims, type.dims + type.rank)},
        {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  // Pad with spaces so that the data starts 8-byte aligned.
  text.append((8 - text.size() % 8) % 8, ' ');
  FILE *file = std::fopen(path.c_str(), "wb");
  if (!file) {
    error = path + ": cannot open for writing: " + std::strerror(errno);
    return nullptr;
  }
  unsigned char lenBytes[8];
  uint64_t len = text.size();
  for (int i = 0; i < 8; ++i)
    lenBytes[i] = uint8_t(len >> (8 * i));
  if (std::fwrite(lenBytes, 1, 8, file) != 8 ||
      std::fwrite(text.data(), 1, text.size(), file) != text.size()) {
    error = path + ": write failed: " + std::strerror(errno);
    std::fclose(file);
    return nullptr;
  }
  return file;
}

bool fsdp::host::finishFile(FILE *file, const std::string &path,
                            std::string &error) {
  bool ok = std::fflush(file) == 0 && ::fsync(fileno(file)) == 0;
  int saved = errno;
  ok = std::fclose(file) == 0 && ok;
  if (!ok)
    error = path + ": write failed: " + std::strerror(saved ? saved : errno);
  return ok;
}

bool fsdp::host::writeSafetensors(const std::string &path,
                                  const std::vector<TensorImage> &tensors,
                                  std::string &error) {
  std::vector<std::pair<std::string, fsdp_type>> types;
  for (const TensorImage &t : tensors)
    types.push_back({t.name, t.type});
  FILE *file = startSafetensors(path, types, error);
  if (!file)
    return false;
  for (const TensorImage &t : tensors)
    if (std::fwrite(t.bytes.data(), 1, t.bytes.size(), file) !=
        t.bytes.size()) {
      error = path + ": write failed: " + std::strerror(errno);
      std::fclose(file);
      return false;
    }
  return finishFile(file, path, error);
}

//===----------------------------------------------------------------------===//
// Hugging Face weights
//===----------------------------------------------------------------------===//

namespace {

/// The tensors of a Hugging Face checkpoint: one file, or the files of a
/// model.safetensors.index.json.
struct WeightSet {
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  /// Tensor name -> (file, entry).
  std::map<std::string, std::pair<const SafetensorsFile *, TensorEntry>>
      tensors;
};

/// Opens the files at `path`; returns an error message or "".
std::string openWeights(const std::string &path, WeightSet &set) {
  std::string index = path, single = path;
  if (isDirectory(path)) {
    index = path + "/model.safetensors.index.json";
    single = path + "/model.safetensors";
    if (pathExists(index))
      single.clear();
    else if (pathExists(single))
      index.clear();
    else
      return path + ": holds neither model.safetensors nor "
                    "model.safetensors.index.json";
  } else if (path.size() > 5 &&
             path.compare(path.size() - 5, 5, ".json") == 0) {
    single.clear();
  } else {
    index.clear();
  }
  std::string error;
  if (!single.empty()) {
    set.files.push_back(SafetensorsFile::open(single, error));
    if (!set.files.back())
      return error;
    for (const auto &[name, entry] : set.files.back()->entries())
      set.tensors[name] = {set.files.back().get(), entry};
    return "";
  }
  std::string text;
  if (!readText(index, text))
    return index + ": cannot open for reading: " + std::strerror(errno);
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object())
    return index + ": not a JSON object";
  auto map = doc.find("weight_map");
  if (map == doc.end() || !map->is_object())
    return index + ": field 'weight_map' must be an object of tensor -> file";
  std::string dir = index.substr(0, index.find_last_of('/') + 1);
  std::map<std::string, const SafetensorsFile *> opened;
  for (auto &[name, file] : map->items()) {
    if (!file.is_string() || file.get<std::string>().empty() ||
        file.get<std::string>().find('/') != std::string::npos)
      return index + ": field 'weight_map." + name +
             "' must be a file name, got " + file.dump();
    std::string filePath = dir + file.get<std::string>();
    auto it = opened.find(filePath);
    if (it == opened.end()) {
      set.files.push_back(SafetensorsFile::open(filePath, error));
      if (!set.files.back())
        return error;
      it = opened.insert({filePath, set.files.back().get()}).first;
    }
    auto entry = it->second->entries().find(name);
    if (entry == it->second->entries().end())
      return index + ": tensor '" + name + "' is mapped to " +
             file.get<std::string>() + ", which does not hold it";
    set.tensors[name] = {it->second, entry->second};
  }
  return "";
}

/// The checkpoint tensors one parameter is read from, in its row-major
/// order: itself, or, for the 3-D expert tensors of transformers 5
/// (`...mlp.experts.gate_up_proj` [E, 2I, H], `...mlp.experts.down_proj`
/// [E, H, I]), the per-expert 2-D tensors that save_pretrained writes and
/// the published checkpoints hold: Qwen3-MoE's `experts.<e>.gate_proj`,
/// `up_proj` and `down_proj`, Mixtral's `block_sparse_moe.experts.<e>.w1`
/// (gate), `w3` (up) and `w2` (down), and its `block_sparse_moe.gate` for
/// the router. Each piece holds the same number of elements.
struct Source {
  std::vector<std::string> names;
  /// Set when a piece is missing: the names that were looked for.
  std::string missing;
};

bool endsWith(const std::string &s, const std::string &tail) {
  return s.size() >= tail.size() &&
         s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

Source sourceOf(const WeightSet &set, const std::string &name,
                int64_t experts) {
  if (set.tensors.count(name))
    return {{name}, ""};
  std::string layer;
  std::vector<std::vector<std::string>> layouts; // per layout: suffixes
  const std::string gateUp = ".mlp.experts.gate_up_proj";
  const std::string down = ".mlp.experts.down_proj";
  const std::string router = ".mlp.gate.weight";
  if (endsWith(name, gateUp)) {
    layer = name.substr(0, name.size() - gateUp.size());
    layouts = {
        {".mlp.experts.#.gate_proj.weight", ".mlp.experts.#.up_proj.weight"},
        {".block_sparse_moe.experts.#.w1.weight",
         ".block_sparse_moe.experts.#.w3.weight"}};
  } else if (endsWith(name, down)) {
    layer = name.substr(0, name.size() - down.size());
    layouts = {{".mlp.experts.#.down_proj.weight"},
               {".block_sparse_moe.experts.#.w2.weight"}};
  } else if (endsWith(name, router)) {
    layer = name.substr(0, name.size() - router.size());
    if (set.tensors.count(layer + ".block_sparse_moe.gate.weight"))
      return {{layer + ".block_sparse_moe.gate.weight"}, ""};
    return {{}, name};
  } else {
    return {{}, name};
  }
  for (const std::vector<std::string> &suffixes : layouts) {
    Source source;
    for (int64_t e = 0; e < experts && source.missing.empty(); ++e)
      for (const std::string &suffix : suffixes) {
        std::string piece = layer + suffix;
        piece.replace(piece.find('#'), 1, std::to_string(e));
        if (!set.tensors.count(piece)) {
          source.missing = piece;
          break;
        }
        source.names.push_back(piece);
      }
    if (source.missing.empty())
      return source;
  }
  return {{}, name + " (or its per-expert " + layer + layouts[0][0] + ", ...)"};
}

std::string listNames(const std::vector<std::string> &names) {
  std::string s;
  for (const std::string &name : names)
    s += "\n  " + name;
  return s;
}

} // namespace

void fsdp::host::loadParams(fsdp_program &p, const std::string &path,
                            bool strict) {
  WeightSet set;
  std::string error = openWeights(path, set);
  if (!error.empty())
    failAll(p, "load", error);
  // The whole comparison first, on every rank alike: one message listing
  // every missing tensor and every mismatch.
  std::vector<std::string> missing, mismatched;
  std::set<std::string> used;
  // Each parameter's source, found once, read below.
  std::vector<Source> sources(p.params.size());
  for (size_t i = 0; i < p.params.size(); ++i) {
    const Param &param = p.params[i];
    if (param.state)
      continue;
    Layout layout = layoutOf(p, param);
    fsdp_type whole = param.type;
    for (int64_t d = 0; d < whole.rank; ++d)
      whole.dims[d] = layout.whole[d];
    Source &source = sources[i] =
        sourceOf(set, param.name, whole.rank ? whole.dims[0] : 1);
    if (source.names.empty()) {
      missing.push_back(source.missing + " (" + typeString(whole) + ")");
      continue;
    }
    // Each piece is an equal share of the parameter: the whole tensor, or
    // one expert's rows ([I, H] twice or [H, I] for [E, ...]).
    std::vector<int64_t> pieceShape = layout.whole;
    if (source.names.size() > 1) {
      pieceShape.erase(pieceShape.begin());
      pieceShape[0] /= int64_t(source.names.size()) / whole.dims[0];
    }
    for (const std::string &piece : source.names) {
      used.insert(piece);
      const auto &[file, entry] = set.tensors.at(piece);
      if (entry.shape != pieceShape ||
          !convertible(entry.dtype, param.type.dtype))
        mismatched.push_back(
            piece + ": " + file->path() + " has " + entryString(entry) +
            ", the program expects " + typeString(whole) +
            (source.names.size() > 1 ? " (for " + param.name + ")"
                                     : std::string()));
    }
  }
  std::vector<std::string> unexpected;
  for (const auto &[name, value] : set.tensors)
    if (!used.count(name))
      unexpected.push_back(name);
  if (!missing.empty() || !mismatched.empty() ||
      (strict && !unexpected.empty())) {
    std::string message = path + ":";
    if (!missing.empty())
      message += " missing " + std::to_string(missing.size()) +
                 " tensor(s) the program needs:" + listNames(missing) + "\n";
    if (!mismatched.empty())
      message +=
          " " + std::to_string(mismatched.size()) +
          " tensor(s) of the wrong shape or dtype:" + listNames(mismatched) +
          "\n";
    if (strict && !unexpected.empty())
      message += " " + std::to_string(unexpected.size()) +
                 " tensor(s) the program does not have (--strict-load):" +
                 listNames(unexpected) + "\n";
    message.pop_back();
    failAll(p, "load", message);
  }
  if (!unexpected.empty() && p.worldRank == 0)
    std::fprintf(stderr,
                 "warning: %s: %zu tensor(s) the program does not have are "
                 "ignored (an error with --strict-load):%s\n",
                 path.c_str(), unexpected.size(),
                 listNames(unexpected).c_str());

  for (size_t i = 0; i < p.params.size(); ++i) {
    Param &param = p.params[i];
    param.tensor = newTensor(param.type, param.host);
    param.tensor->borrowed = true;
    if (param.state)
      continue; // optimizer state starts at zero
    Layout layout = layoutOf(p, param);
    const Source &source = sources[i];
    int64_t total = 1;
    for (int64_t d : layout.whole)
      total *= d;
    int64_t share = total / int64_t(source.names.size());
    std::vector<char> image(size_t(byteSize(param.type)));
    size_t esize = fsdp_rt_dtype_size(param.type.dtype);
    for (const Run &run : runsOf(layout))
      for (int64_t done = 0; done < run.count;) {
        // The piece holding element run.global + done, and how much of the
        // run it holds.
        int64_t at = run.global + done, piece = at / share;
        int64_t count = std::min(run.count - done, (piece + 1) * share - at);
        const std::string &name = source.names[size_t(piece)];
        const auto &[file, entry] = set.tensors.at(name);
        if (!file->read(name, entry, at - piece * share, count,
                        param.type.dtype,
                        image.data() + size_t(run.local + done) * esize, error))
          fail("load", error);
        done += count;
      }
    upload(param.tensor, image.data());
  }
}
