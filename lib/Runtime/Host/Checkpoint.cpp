//===- Checkpoint.cpp - Distributed checkpoints: save, resume, reshard ----===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// DIR/step-<N>/rank<R>.safetensors holds rank R's blocks of every parameter
// and optimizer state; DIR/step-<N>/index.json the mesh, every tensor's
// whole shape and layout (the mesh axes splitting each dim, major first, and
// the group count), the step and the data position; DIR/latest names the
// newest complete checkpoint.
//
// A save writes into DIR/.step-<N>.partial/, fsyncs every file, renames the
// directory into place and only then moves `latest`, so a save that dies
// (kill -9, a full disk) leaves the previous checkpoint and `latest` as they
// were. A load cuts each block it needs out of the saved blocks, whatever
// mesh saved them: a block is a set of runs of the whole tensor
// (Layout.cpp), and each run is read from a saved block that covers it.
//
//===----------------------------------------------------------------------===//

#include "Safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <functional>
#include <set>
#include <sys/stat.h>
#include <unistd.h>

using namespace fsdp::host;
using json = nlohmann::json;

namespace {

const char *const kFormat = "fsdp-mlir-checkpoint";

std::string stepName(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step-%08lld", (long long)step);
  return name;
}

std::string rankFile(int64_t rank) {
  char name[48];
  std::snprintf(name, sizeof(name), "rank%05lld.safetensors", (long long)rank);
  return name;
}

/// fsyncs a file or directory, so that a rename into it is durable.
bool syncPath(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0)
    return false;
  bool ok = ::fsync(fd) == 0;
  ::close(fd);
  return ok;
}

void removeTree(const std::string &path) {
  if (!pathExists(path))
    return;
  ::nftw(
      path.c_str(),
      [](const char *file, const struct stat *, int, struct FTW *) {
        return std::remove(file);
      },
      16, FTW_DEPTH | FTW_PHYS);
}

/// Writes `text` to `path` through a fsynced temporary renamed into place.
bool writeAtomically(const std::string &path, const std::string &text,
                     std::string &error) {
  std::string tmp = path + ".tmp";
  FILE *f = std::fopen(tmp.c_str(), "wb");
  if (!f) {
    error = tmp + ": cannot open for writing: " + std::strerror(errno);
    return false;
  }
  if (std::fwrite(text.data(), 1, text.size(), f) != text.size()) {
    error = tmp + ": write failed: " + std::strerror(errno);
    std::fclose(f);
    return false;
  }
  if (!finishFile(f, tmp, error))
    return false;
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    error = path + ": rename failed: " + std::strerror(errno);
    return false;
  }
  return syncPath(path.substr(0, path.find_last_of('/')));
}

/// Whether every rank's `ok` is true; if not, the first failing rank prints
/// its `error` and every rank exits (after `cleanup` on rank 0).
void agreeOrStop(const fsdp_program &p, bool ok, const std::string &error,
                 const std::function<void()> &cleanup = {}) {
  int first = ok ? INT_MAX : p.worldRank, failing = INT_MAX;
  MPI_Allreduce(&first, &failing, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (failing == INT_MAX)
    return;
  if (p.worldRank == failing)
    std::fprintf(stderr, "fsdp runtime error: checkpoint: %s\n", error.c_str());
  if (p.worldRank == 0 && cleanup)
    cleanup();
  MPI_Finalize();
  std::exit(1);
}

//===----------------------------------------------------------------------===//
// The index of a saved checkpoint, and cutting blocks out of it
//===----------------------------------------------------------------------===//

struct SavedTensor {
  /// Per dim: whole size, groups, and the trailing axes of `dims` that form
  /// the inner (padded) level.
  std::vector<int64_t> shape, groups, inner;
  /// Per dim, the saving mesh's axis indices, major first.
  std::vector<std::vector<int>> dims;
  fsdp_rt_dtype dtype;
  bool parameter = true;
};

struct Checkpoint {
  std::string dir;
  json index;
  int64_t step = 0;
  std::vector<int64_t> meshSizes;
  std::vector<std::string> meshNames;
  std::vector<std::string> files;
  std::map<std::string, SavedTensor> tensors;
  /// Rank files, opened when first needed.
  mutable std::vector<std::unique_ptr<SafetensorsFile>> opened;

  /// Parses DIR/index.json (or the one DIR/latest names); returns an error
  /// message or "".
  std::string open(const std::string &path);
  const SafetensorsFile &file(int64_t rank) const;
  /// Reads the block of `name` laid out as `layout` into `out` as `dtype`.
  void readBlock(const std::string &name, const Layout &layout,
                 fsdp_rt_dtype dtype, char *out) const;
};

std::string Checkpoint::open(const std::string &path) {
  dir = path;
  std::string latest;
  if (readText(path + "/latest", latest)) {
    while (!latest.empty() && std::isspace((unsigned char)latest.back()))
      latest.pop_back();
    if (latest.empty() || latest.find('/') != std::string::npos)
      return path + "/latest: does not name a checkpoint directory";
    dir = path + "/" + latest;
  }
  std::string text;
  if (!readText(dir + "/index.json", text))
    return path + ": no checkpoint (neither latest nor index.json)";
  std::string where = dir + "/index.json: ";
  index = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (index.is_discarded() || !index.is_object())
    return where + "not a JSON object";
  if (index.value("format", "") != kFormat || index.value("version", 0) != 1)
    return where + "not an fsdp-mlir checkpoint of version 1";
  auto field = [&](const char *key) -> const json * {
    auto it = index.find(key);
    return it == index.end() ? nullptr : &*it;
  };
  const json *stepField = field("step"), *mesh = field("mesh"),
             *fileList = field("files"), *tensorMap = field("tensors");
  if (!stepField || !stepField->is_number_unsigned())
    return where + "field 'step' must be a non-negative integer";
  step = stepField->get<int64_t>();
  if (!mesh || !mesh->is_array())
    return where + "field 'mesh' must be an array";
  int64_t world = 1;
  for (const json &axis : *mesh) {
    if (!axis.is_object() || !axis.contains("name") ||
        !axis["name"].is_string() || !axis.contains("size") ||
        !axis["size"].is_number_unsigned() || axis["size"] == 0)
      return where + "field 'mesh' entries must be {name, size}";
    meshNames.push_back(axis["name"]);
    meshSizes.push_back(axis["size"]);
    world *= meshSizes.back();
  }
  if (!fileList || !fileList->is_array() || int64_t(fileList->size()) != world)
    return where + "field 'files' must list one file per rank (" +
           std::to_string(world) + ")";
  for (const json &f : *fileList) {
    if (!f.is_string() || f.get<std::string>().find('/') != std::string::npos)
      return where + "field 'files' must hold file names";
    files.push_back(f);
  }
  opened.resize(files.size());
  if (!tensorMap || !tensorMap->is_object())
    return where + "field 'tensors' must be an object";
  for (auto &[name, t] : tensorMap->items()) {
    std::string at = where + "tensor '" + name + "': ";
    SavedTensor saved;
    if (!t.is_object() || !t.contains("shape") || !t["shape"].is_array() ||
        !t.contains("dims") || !t["dims"].is_array() || !t.contains("groups") ||
        !t["groups"].is_array() || t["dims"].size() != t["shape"].size() ||
        t["groups"].size() != t["shape"].size() || !t.contains("inner") ||
        !t["inner"].is_array() || t["inner"].size() != t["shape"].size())
      return at + "needs 'shape', 'dims', 'groups' and 'inner' of one entry "
                  "per dim";
    for (size_t d = 0; d < t["shape"].size(); ++d) {
      if (!t["shape"][d].is_number_unsigned() ||
          !t["groups"][d].is_number_unsigned() || t["groups"][d] == 0 ||
          !t["inner"][d].is_number_unsigned() || !t["dims"][d].is_array() ||
          t["inner"][d].get<size_t>() > t["dims"][d].size())
        return at + "bad entry for dim " + std::to_string(d);
      saved.shape.push_back(t["shape"][d]);
      saved.groups.push_back(t["groups"][d]);
      saved.inner.push_back(t["inner"][d]);
      std::vector<int> axes;
      for (const json &axis : t["dims"][d]) {
        auto it = std::find(meshNames.begin(), meshNames.end(),
                            axis.is_string() ? axis.get<std::string>() : "");
        if (it == meshNames.end())
          return at + "dim " + std::to_string(d) + " names no mesh axis";
        axes.push_back(int(it - meshNames.begin()));
      }
      saved.dims.push_back(axes);
    }
    saved.parameter = t.value("kind", "") == "parameter";
    static const char *names[] = {"f32", "bf16", "f16", "i32", "i64"};
    std::string dtype = t.value("dtype", "");
    auto found = std::find(std::begin(names), std::end(names), dtype);
    if (found == std::end(names))
      return at + "unknown dtype '" + dtype + "'";
    saved.dtype = fsdp_rt_dtype(found - std::begin(names));
    tensors[name] = saved;
  }
  return "";
}

const SafetensorsFile &Checkpoint::file(int64_t rank) const {
  if (!opened[rank]) {
    std::string error;
    opened[rank] = SafetensorsFile::open(dir + "/" + files[rank], error);
    if (!opened[rank])
      fail("checkpoint", error);
  }
  return *opened[rank];
}

void Checkpoint::readBlock(const std::string &name, const Layout &layout,
                           fsdp_rt_dtype dtype, char *out) const {
  const SavedTensor &saved = tensors.at(name);
  // Every saved rank's runs of this tensor, by their first element.
  struct SavedRun {
    int64_t global, count, local, rank;
  };
  std::vector<SavedRun> saves;
  for (int64_t r = 0; r < int64_t(files.size()); ++r) {
    std::vector<int64_t> coords(meshSizes.size());
    for (int64_t i = int64_t(meshSizes.size()) - 1, rest = r; i >= 0; --i) {
      coords[i] = rest % meshSizes[i];
      rest /= meshSizes[i];
    }
    const SafetensorsFile &f = file(r);
    auto entry = f.entries().find(name);
    if (entry == f.entries().end())
      fail("checkpoint", f.path() + ": tensor '" + name +
                             "' is missing from this rank's file");
    Layout old = wholeLayout(entry->second.shape);
    old.whole = saved.shape;
    old.groups = saved.groups;
    if (old.local.size() != saved.shape.size())
      fail("checkpoint", f.path() + ": tensor '" + name + "' has rank " +
                             std::to_string(old.local.size()) + ", index " +
                             std::to_string(saved.shape.size()));
    for (size_t d = 0; d < saved.dims.size(); ++d) {
      size_t split = saved.dims[d].size() - size_t(saved.inner[d]);
      for (size_t k = 0; k < saved.dims[d].size(); ++k) {
        int axis = saved.dims[d][k];
        int64_t &parts = k < split ? old.outerParts[d] : old.innerParts[d];
        int64_t &block = k < split ? old.outer[d] : old.inner[d];
        parts *= meshSizes[axis];
        block = block * meshSizes[axis] + coords[axis];
      }
    }
    if (std::string bad = checkLayout(old); !bad.empty())
      fail("checkpoint", f.path() + ": tensor '" + name + "': " + bad);
    for (const Run &run : runsOf(old))
      saves.push_back({run.global, run.count, run.local, r});
  }
  std::stable_sort(
      saves.begin(), saves.end(),
      [](const SavedRun &a, const SavedRun &b) { return a.global < b.global; });
  size_t esize = fsdp_rt_dtype_size(dtype);
  std::string error;
  for (const Run &run : runsOf(layout)) {
    for (int64_t at = run.global, end = run.global + run.count; at < end;) {
      // Saved runs are equal (replicas) or disjoint: the last one starting
      // at or before `at` covers it, if any does.
      auto it = std::upper_bound(
          saves.begin(), saves.end(), at,
          [](int64_t g, const SavedRun &s) { return g < s.global; });
      if (it == saves.begin() ||
          std::prev(it)->global + std::prev(it)->count <= at)
        fail("checkpoint", dir + ": no saved block holds element " +
                               std::to_string(at) + " of '" + name + "'");
      const SavedRun &s = *std::prev(it);
      int64_t n = std::min(end, s.global + s.count) - at;
      const SafetensorsFile &f = file(s.rank);
      if (!f.read(name, f.entries().at(name), s.local + (at - s.global), n,
                  dtype, out + size_t(run.local + (at - run.global)) * esize,
                  error))
        fail("checkpoint", error);
      at += n;
    }
  }
}

} // namespace

//===----------------------------------------------------------------------===//
// Save
//===----------------------------------------------------------------------===//

void fsdp::host::checkCheckpointDir(const fsdp_program &p,
                                    const std::string &dir) {
  bool ok = true;
  std::string error;
  if (p.worldRank == 0) {
    ::mkdir(dir.c_str(), 0777);
    struct stat st;
    std::string probe = dir + "/.write-test";
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      ok = false;
      error = dir + ": cannot create the checkpoint directory";
    } else if (!writeAtomically(probe, "ok\n", error)) {
      ok = false;
    }
    std::remove(probe.c_str());
  }
  int flag = ok;
  MPI_Bcast(&flag, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (!flag)
    failAll(p, "checkpoint",
            error + " (--save, checked before the first step)");
}

void fsdp::host::saveCheckpoint(const fsdp_program &p, const std::string &dir,
                                const CheckpointState &state, int64_t keep) {
  std::string name = stepName(state.step);
  std::string staging = dir + "/." + name + ".partial";
  std::string error;
  bool ok = true;
  if (p.worldRank == 0) {
    removeTree(staging);
    if (::mkdir(staging.c_str(), 0777) != 0) {
      ok = false;
      error = staging + ": cannot create: " + std::strerror(errno);
    }
  }
  agreeOrStop(p, ok, error);

  // This rank's blocks, whole tensors when unsplit.
  std::vector<TensorImage> images;
  json tensors = json::object();
  for (const Param &param : p.params) {
    images.push_back({param.name, param.type, download(param.tensor)});
    const Param &owner = layoutOwner(p, param);
    Layout layout = layoutOf(p, param);
    json dims = json::array(), inner = json::array();
    for (int64_t d = 0; d < param.type.rank; ++d) {
      json axes = json::array();
      if (!owner.dimOrder.empty())
        for (int axis : owner.dimOrder[d])
          axes.push_back(p.axes[axis].name);
      dims.push_back(axes);
      inner.push_back(owner.dimInner.empty() ? 0 : owner.dimInner[d]);
    }
    tensors[param.name] = {
        {"kind", param.state ? "optimizer_state" : "parameter"},
        {"dtype", dtypeName(param.type.dtype)},
        {"shape", layout.whole},
        {"dims", dims},
        {"groups", layout.groups},
        {"inner", inner}};
  }
  ok = writeSafetensors(staging + "/" + rankFile(p.worldRank), images, error);
  agreeOrStop(p, ok, error, [&] { removeTree(staging); });
  // Fault injection for the tests: die between the rank files and the
  // commit, as a kill -9 would.
  if (p.worldRank == 0 && std::getenv("FSDP_TEST_KILL_IN_SAVE"))
    std::raise(SIGKILL);

  if (p.worldRank == 0) {
    json files = json::array(), mesh = json::array();
    for (int r = 0; r < p.worldSize; ++r)
      files.push_back(rankFile(r));
    for (const MeshAxis &axis : p.axes)
      mesh.push_back({{"name", axis.name}, {"size", axis.size}});
    int64_t batch = globalBatch(p);
    json index = {
        {"format", kFormat},
        {"version", 1},
        {"step", state.step},
        {"world_size", p.worldSize},
        {"mesh", mesh},
        {"files", files},
        {"data",
         {{"path", state.data},
          {"global_batch", batch},
          {"samples", state.step * batch}}},
        {"rng",
         {{"seed", state.seed},
          {"generator", "splitmix64 keyed by (seed, name, element) for init "
                        "and (seed, step, sample) for synthetic tokens"}}},
        {"tensors", tensors}};
    std::string final = dir + "/" + name, old = dir + "/." + name + ".old";
    ok =
        writeAtomically(staging + "/index.json", index.dump(1) + "\n", error) &&
        syncPath(staging);
    if (ok && pathExists(final)) {
      removeTree(old);
      ok = std::rename(final.c_str(), old.c_str()) == 0;
    }
    if (ok && std::rename(staging.c_str(), final.c_str()) != 0) {
      ok = false;
      error = final + ": rename failed: " + std::strerror(errno);
    }
    ok = ok && syncPath(dir) &&
         writeAtomically(dir + "/latest", name + "\n", error);
    if (ok)
      removeTree(old);
    else if (error.empty())
      error = final + ": cannot move into place";
    // --keep: the newest `keep` checkpoints stay.
    if (ok && keep > 0) {
      std::vector<std::string> steps;
      if (DIR *d = ::opendir(dir.c_str())) {
        while (dirent *e = ::readdir(d))
          if (std::strncmp(e->d_name, "step-", 5) == 0)
            steps.push_back(e->d_name);
        ::closedir(d);
      }
      std::sort(steps.begin(), steps.end());
      for (size_t i = 0; i + size_t(keep) < steps.size(); ++i)
        if (steps[i] != name)
          removeTree(dir + "/" + steps[i]);
    }
  }
  agreeOrStop(p, ok, error, [&] { removeTree(staging); });
}

//===----------------------------------------------------------------------===//
// Load
//===----------------------------------------------------------------------===//

CheckpointState fsdp::host::loadCheckpoint(fsdp_program &p,
                                           const std::string &path) {
  Checkpoint ck;
  std::string error = ck.open(path);
  if (!error.empty())
    failAll(p, "checkpoint", error);
  std::vector<std::string> problems;
  std::set<std::string> used;
  for (const Param &param : p.params) {
    Layout layout = layoutOf(p, param);
    auto it = ck.tensors.find(param.name);
    if (it == ck.tensors.end()) {
      problems.push_back(param.name + ": not in the checkpoint");
      continue;
    }
    used.insert(param.name);
    if (it->second.shape != layout.whole ||
        !convertible(it->second.dtype, param.type.dtype)) {
      fsdp_type whole = param.type;
      std::copy(layout.whole.begin(), layout.whole.end(), whole.dims);
      fsdp_type saved{it->second.dtype, int64_t(it->second.shape.size()), {}};
      std::copy(it->second.shape.begin(), it->second.shape.end(), saved.dims);
      problems.push_back(param.name + ": saved as " + typeString(saved) +
                         ", the program has " + typeString(whole));
    }
  }
  int64_t batch = globalBatch(p);
  int64_t savedBatch = ck.index["data"].value("global_batch", int64_t(0));
  if (batch != savedBatch)
    problems.push_back("the global batch is " + std::to_string(batch) +
                       " here and " + std::to_string(savedBatch) +
                       " in the checkpoint: the data position would not carry "
                       "over");
  if (!problems.empty()) {
    std::string message = ck.dir + ": cannot resume this program from it:";
    for (const std::string &problem : problems)
      message += "\n  " + problem;
    failAll(p, "checkpoint", message);
  }
  if (p.worldRank == 0)
    for (const auto &[name, saved] : ck.tensors)
      if (!used.count(name))
        std::fprintf(stderr,
                     "warning: %s: tensor '%s' of the checkpoint is not in "
                     "this program; ignored\n",
                     ck.dir.c_str(), name.c_str());
  for (Param &param : p.params) {
    param.tensor = newTensor(param.type, param.host);
    param.tensor->borrowed = true;
    std::vector<char> image(size_t(byteSize(param.type)));
    ck.readBlock(param.name, layoutOf(p, param), param.type.dtype,
                 image.data());
    upload(param.tensor, image.data());
  }
  CheckpointState state;
  state.step = ck.step;
  const json &rng = ck.index.value("rng", json::object());
  state.seed = rng.value("seed", uint64_t(0));
  state.data = ck.index["data"].value("path", "");
  return state;
}

void fsdp::host::consolidateCheckpoint(const fsdp_program &p,
                                       const std::string &path,
                                       const std::string &output) {
  Checkpoint ck;
  std::string error = ck.open(path);
  if (!error.empty())
    failAll(p, "consolidate", error);
  std::vector<std::pair<std::string, fsdp_type>> types;
  for (const auto &[name, saved] : ck.tensors) {
    if (!saved.parameter)
      continue;
    fsdp_type type{saved.dtype, int64_t(saved.shape.size()), {}};
    std::copy(saved.shape.begin(), saved.shape.end(), type.dims);
    types.push_back({name, type});
  }
  std::string tmp = output + ".tmp";
  FILE *file = startSafetensors(tmp, types, error);
  bool ok = file != nullptr;
  for (const auto &[name, type] : types) {
    if (!ok)
      break;
    const SavedTensor &saved = ck.tensors.at(name);
    std::vector<char> image(size_t(byteSize(type)));
    ck.readBlock(name, wholeLayout(saved.shape), type.dtype, image.data());
    if (std::fwrite(image.data(), 1, image.size(), file) != image.size()) {
      ok = false;
      error = tmp + ": write failed: " + std::strerror(errno);
      std::fclose(file);
    }
  }
  ok = ok && finishFile(file, tmp, error);
  if (ok && std::rename(tmp.c_str(), output.c_str()) != 0) {
    ok = false;
    error = output + ": rename failed: " + std::strerror(errno);
  }
  if (!ok)
    failAll(p, "consolidate", error);
  if (p.worldRank == 0)
    std::printf("consolidated %zu parameters of %s (step %lld) into %s\n",
                types.size(), ck.dir.c_str(), (long long)ck.step,
                output.c_str());
}
