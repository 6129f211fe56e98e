//===- GraphImport.cpp - graph.json to nn dialect -------------------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The importer knows, per op, only its operand count range and required
// attributes; result types come from each op's own inference, so the import
// applies exactly the shape rules the verifiers apply. Every error names the
// file, the node and the field. JSON is untrusted input: no value is used
// before its type is checked.
//
//===----------------------------------------------------------------------===//

#include "fsdp/Import/GraphImport.h"
#include "fsdp/Dialect/NN/IR/NNOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <limits>
#include <vector>

#include <nlohmann/json.hpp>

using namespace mlir;
using json = nlohmann::json;

namespace {

/// How a JSON attribute value becomes an MLIR attribute.
enum class AttrKind { Unit, F64, I64, I64Array, F64Array, String, Dtype };

/// An attribute a graph.json node may give its op.
struct ImportAttr {
  StringRef name;
  AttrKind kind;
  bool required;
};

/// What the importer must know about an op before its own rules apply.
struct OpInfo {
  StringRef name; ///< the graph.json spelling; the op is `nn.<name>`
  unsigned minOperands, maxOperands;
  ArrayRef<ImportAttr> attrs;
};

constexpr unsigned kVariadic = ~0u;

// kOps: every op with the NN_Imported trait, from its ODS.
#include "NNImportTable.inc"

/// The JSON type name used in messages.
std::string jsonTypeName(const json &value) { return value.type_name(); }

/// Whether `value` is an integer that fits int64_t (JSON has no bound).
bool isInt64(const json &value) {
  return value.is_number_integer() &&
         (!value.is_number_unsigned() ||
          value.get<uint64_t>() <=
              static_cast<uint64_t>(std::numeric_limits<int64_t>::max()));
}

/// The elements of array `value` as Ts when each passes `ok`, else nullopt
/// (also when `value` is no array).
template <typename T>
std::optional<SmallVector<T>>
elementsOf(const json &value, llvm::function_ref<bool(const json &)> ok) {
  if (!value.is_array())
    return std::nullopt;
  SmallVector<T> elements;
  for (const json &v : value) {
    if (!ok(v))
      return std::nullopt;
    elements.push_back(v.get<T>());
  }
  return elements;
}

/// The largest element count a tensor may have: its byte size must stay
/// well inside int64_t.
constexpr int64_t kMaxElements = int64_t(1) << 56;

class GraphImporter {
public:
  GraphImporter(StringRef text, StringRef filename, MLIRContext *context)
      : text(text), filename(filename), context(context), builder(context) {}

  OwningOpRef<ModuleOp> run();

private:
  /// Emits "<file>:<line>:<col>: error: <context>: <message>" and fails.
  LogicalResult fail(Location loc, const Twine &message) {
    emitError(loc) << message;
    return failure();
  }
  LogicalResult fail(const Twine &message) { return fail(fileLoc(0), message); }

  /// A location in the file: the line of the first occurrence of `needle`
  /// after `from`, or the file itself.
  FileLineColLoc fileLoc(size_t offset);
  size_t findQuoted(StringRef needle, size_t from);

  Type parseDtype(const json &value, bool allowInt);
  FailureOr<SmallVector<int64_t>> parseShape(const json &value,
                                             const Twine &where, Location loc);
  LogicalResult checkName(const json &entry, const Twine &where, Location loc,
                          std::string &name);
  LogicalResult importTensors(const json &root, func::FuncOp func);
  FailureOr<Attribute> parseInit(const json &init, const Twine &where,
                                 Location loc);
  LogicalResult importNode(const json &node, size_t index, size_t &cursor);
  /// The node's op (its `op` field, checked) and its import rules; adds the
  /// op to `where`.
  FailureOr<const OpInfo *> opInfo(const json &node, std::string &where,
                                   Location loc, std::string &opName);
  /// The node's `inputs`, as many as the op takes, each a known value.
  LogicalResult importOperands(const json &node, const OpInfo &info,
                               const std::string &where, Location loc,
                               SmallVector<Value> &operands);
  /// The node's `attrs` (each one the op has, of its kind), the required
  /// ones checked, the op's defaults and the `module` path added.
  LogicalResult importAttrs(const json &node, const OpInfo &info,
                            OperationName mlirName, const std::string &where,
                            Location loc, NamedAttrList &attrs);
  /// Attribute `key` from JSON `value` as `kind` says (`field` in errors).
  LogicalResult importAttr(const std::string &key, const json &value,
                           AttrKind kind, const std::string &field,
                           Location loc, NamedAttrList &attrs);
  FailureOr<Value> lookup(StringRef ref, const Twine &where, Location loc);

  StringRef text, filename;
  /// Offsets at which the lines of `text` start (fileLoc).
  std::vector<size_t> lineStarts;
  MLIRContext *context;
  OpBuilder builder;
  llvm::StringMap<SmallVector<Value>> values;
  SmallVector<Type> argTypes;
  SmallVector<DictionaryAttr> argAttrs;
  SmallVector<std::pair<std::string, std::string>> tensorDecls;
};

size_t GraphImporter::findQuoted(StringRef needle, size_t from) {
  std::string quoted = ("\"" + needle + "\"").str();
  return text.find(quoted, from);
}

FileLineColLoc GraphImporter::fileLoc(size_t offset) {
  if (offset == StringRef::npos || offset > text.size())
    return FileLineColLoc::get(context, filename, 0, 0);
  // The line starts, found once: every node asks for its location, so a
  // count from the start of the file each time made the import quadratic.
  if (lineStarts.empty()) {
    lineStarts.push_back(0);
    for (size_t i = 0; i < text.size(); ++i)
      if (text[i] == '\n')
        lineStarts.push_back(i + 1);
  }
  size_t line = std::upper_bound(lineStarts.begin(), lineStarts.end(), offset) -
                lineStarts.begin();
  return FileLineColLoc::get(context, filename, unsigned(line),
                             unsigned(offset - lineStarts[line - 1] + 1));
}

Type GraphImporter::parseDtype(const json &value, bool allowInt) {
  if (!value.is_string())
    return {};
  std::string s = value.get<std::string>();
  if (s == "f32")
    return builder.getF32Type();
  if (s == "bf16")
    return builder.getBF16Type();
  if (s == "f16")
    return builder.getF16Type();
  if (allowInt && s == "i32")
    return builder.getI32Type();
  if (allowInt && s == "i64")
    return builder.getI64Type();
  return {};
}

FailureOr<SmallVector<int64_t>>
GraphImporter::parseShape(const json &value, const Twine &where, Location loc) {
  if (!value.is_array()) {
    (void)fail(loc, where +
                        ": field 'shape' must be an array of positive "
                        "integers, got " +
                        jsonTypeName(value));
    return failure();
  }
  SmallVector<int64_t> shape;
  int64_t elements = 1;
  for (const json &d : value) {
    if (!isInt64(d) || d.get<int64_t>() < 1) {
      (void)fail(loc, where +
                          ": field 'shape' must hold positive integers, "
                          "got " +
                          d.dump());
      return failure();
    }
    shape.push_back(d.get<int64_t>());
    if (shape.back() > kMaxElements / elements) {
      (void)fail(loc, where + ": field 'shape' has more than 2^56 elements");
      return failure();
    }
    elements *= shape.back();
  }
  return shape;
}

LogicalResult GraphImporter::checkName(const json &entry, const Twine &where,
                                       Location loc, std::string &name) {
  if (!entry.is_object())
    return fail(loc,
                where + ": expected an object, got " + jsonTypeName(entry));
  auto it = entry.find("name");
  if (it == entry.end())
    return fail(loc, where + ": missing field 'name'");
  if (!it->is_string() || it->get<std::string>().empty())
    return fail(loc, where + ": field 'name' must be a non-empty string");
  name = it->get<std::string>();
  if (values.count(name))
    return fail(loc, where + ": duplicate name '" + name + "'");
  if (StringRef(name).contains(':'))
    return fail(loc, where + ": name '" + name + "' must not contain ':'");
  // Names become file names and manifest entries of dumps and checkpoints.
  if (llvm::any_of(name, [](char c) {
        return static_cast<unsigned char>(c) < 0x20 || c == 0x7f || c == '/';
      }))
    return fail(loc, where + ": name " + json(name).dump() +
                         " must not contain '/' or control characters");
  return success();
}

FailureOr<Attribute>
GraphImporter::parseInit(const json &init, const Twine &where, Location loc) {
  auto bad = [&](const Twine &msg) -> FailureOr<Attribute> {
    (void)fail(loc, where + ": field 'init': " + msg);
    return failure();
  };
  if (!init.is_object())
    return bad("expected an object, got " + jsonTypeName(init));
  auto kindIt = init.find("kind");
  if (kindIt == init.end() || !kindIt->is_string())
    return bad("missing string field 'kind'");
  std::optional<fsdp::nn::InitKind> kind =
      fsdp::nn::symbolizeInitKind(kindIt->get<std::string>());
  if (!kind)
    return bad("unknown kind '" + kindIt->get<std::string>() +
               "', expected zeros, ones, normal or uniform");
  auto number = [&](StringRef key, std::optional<double> dflt,
                    double &out) -> LogicalResult {
    auto it = init.find(key.str());
    if (it == init.end()) {
      if (!dflt)
        return (void)bad("missing field '" + key + "'"), failure();
      out = *dflt;
      return success();
    }
    if (!it->is_number())
      return (void)bad("field '" + key + "' must be a number"), failure();
    out = it->get<double>();
    return success();
  };
  double a = 0.0, b = 0.0;
  static const llvm::StringMap<std::vector<std::string>> allowedKeys = {
      {"zeros", {"kind"}},
      {"ones", {"kind"}},
      {"normal", {"kind", "mean", "std"}},
      {"uniform", {"kind", "low", "high"}}};
  const auto &allowed = allowedKeys.lookup(kindIt->get<std::string>());
  for (auto &[key, _] : init.items())
    if (llvm::find(allowed, key) == allowed.end())
      return bad("unknown field '" + key + "' for kind '" +
                 kindIt->get<std::string>() + "'");
  if (*kind == fsdp::nn::InitKind::normal &&
      (failed(number("mean", 0.0, a)) ||
       failed(number("std", std::nullopt, b))))
    return failure();
  if (*kind == fsdp::nn::InitKind::uniform &&
      (failed(number("low", std::nullopt, a)) ||
       failed(number("high", std::nullopt, b))))
    return failure();
  auto attr = fsdp::nn::InitAttr::getChecked(
      [&] { return emitError(loc) << where << ": field 'init': "; }, context,
      *kind, APFloat(a), APFloat(b));
  if (!attr)
    return failure();
  return Attribute(attr);
}

LogicalResult GraphImporter::importTensors(const json &root,
                                           func::FuncOp func) {
  for (StringRef section : {"inputs", "parameters"}) {
    const json &list = root[section.str()];
    bool isParam = section == "parameters";
    size_t cursor = findQuoted(section, 0);
    for (size_t i = 0; i < list.size(); ++i) {
      const json &entry = list[i];
      std::string where = (section + "[" + Twine(i) + "]").str();
      std::string name;
      if (entry.is_object() && entry.contains("name") &&
          entry["name"].is_string()) {
        size_t at = findQuoted(entry["name"].get<std::string>(), cursor);
        if (at != StringRef::npos)
          cursor = at;
        where += " '" + entry["name"].get<std::string>() + "'";
      }
      Location loc = fileLoc(cursor);
      if (failed(checkName(entry, where, loc, name)))
        return failure();
      for (auto &[key, _] : entry.items())
        if (key != "name" && key != "shape" && key != "dtype" &&
            !(isParam && key == "init"))
          return fail(loc, where + ": unknown field '" + key + "'");
      if (!entry.contains("shape"))
        return fail(loc, where + ": missing field 'shape'");
      FailureOr<SmallVector<int64_t>> shape =
          parseShape(entry["shape"], where, loc);
      if (failed(shape))
        return failure();
      if (!entry.contains("dtype"))
        return fail(loc, where + ": missing field 'dtype'");
      Type dtype = parseDtype(entry["dtype"], /*allowInt=*/!isParam);
      if (!dtype)
        return fail(
            loc, where + ": field 'dtype' must be one of " +
                     (isParam ? "f32, bf16, f16" : "f32, bf16, f16, i32, i64") +
                     ", got " + entry["dtype"].dump());
      NamedAttrList attrs;
      if (isParam) {
        attrs.append(fsdp::nn::NNDialect::kParamAttrName,
                     builder.getStringAttr(name));
        Attribute init = fsdp::nn::InitAttr::get(
            context, fsdp::nn::InitKind::zeros, APFloat(0.0), APFloat(0.0));
        if (entry.contains("init")) {
          FailureOr<Attribute> parsed = parseInit(entry["init"], where, loc);
          if (failed(parsed))
            return failure();
          init = *parsed;
        }
        attrs.append(fsdp::nn::NNDialect::kInitAttrName, init);
      } else {
        attrs.append(fsdp::nn::NNDialect::kInputAttrName,
                     builder.getStringAttr(name));
      }
      Block &body = func.getBody().front();
      auto type = RankedTensorType::get(*shape, dtype);
      values[name] = {body.addArgument(type, loc)};
      argTypes.push_back(type);
      argAttrs.push_back(attrs.getDictionary(context));
    }
  }
  return success();
}

FailureOr<Value> GraphImporter::lookup(StringRef ref, const Twine &where,
                                       Location loc) {
  auto [name, index] = ref.rsplit(':');
  unsigned resultIndex = 0;
  if (!index.empty() && index.getAsInteger(10, resultIndex)) {
    (void)fail(loc, where + ": malformed value reference '" + ref + "'");
    return failure();
  }
  if (index.empty())
    name = ref;
  auto it = values.find(name);
  if (it == values.end()) {
    (void)fail(loc, where + ": '" + name +
                        "' is not an input, a parameter or an earlier node");
    return failure();
  }
  if (resultIndex >= it->second.size()) {
    (void)fail(loc, where + ": '" + name + "' has " + Twine(it->second.size()) +
                        " result(s), no result " + Twine(resultIndex));
    return failure();
  }
  return it->second[resultIndex];
}

FailureOr<const OpInfo *> GraphImporter::opInfo(const json &node,
                                                std::string &where,
                                                Location loc,
                                                std::string &opName) {
  auto opIt = node.find("op");
  if (opIt == node.end())
    return fail(loc, where + ": missing field 'op'");
  if (!opIt->is_string())
    return fail(loc, where + ": field 'op' must be a string");
  opName = opIt->get<std::string>();
  const OpInfo *info =
      llvm::find_if(kOps, [&](const OpInfo &op) { return op.name == opName; });
  if (info == std::end(kOps))
    return fail(loc, where + ": field 'op': unknown op '" + opName + "'");
  where += " (op '" + opName + "')";
  return info;
}

LogicalResult GraphImporter::importOperands(const json &node,
                                            const OpInfo &info,
                                            const std::string &where,
                                            Location loc,
                                            SmallVector<Value> &operands) {
  auto inputsIt = node.find("inputs");
  if (inputsIt == node.end())
    return fail(loc, where + ": missing field 'inputs'");
  if (!inputsIt->is_array())
    return fail(loc, where + ": field 'inputs' must be an array of names");
  size_t numInputs = inputsIt->size();
  if (numInputs < info.minOperands || numInputs > info.maxOperands) {
    std::string expected = info.minOperands == info.maxOperands
                               ? std::to_string(info.minOperands)
                           : info.maxOperands == kVariadic
                               ? "at least " + std::to_string(info.minOperands)
                               : std::to_string(info.minOperands) + " or " +
                                     std::to_string(info.maxOperands);
    return fail(loc, where + ": field 'inputs' has " + Twine(numInputs) +
                         (numInputs == 1 ? " entry" : " entries") +
                         ", expected " + expected);
  }
  for (size_t i = 0; i < numInputs; ++i) {
    const json &ref = (*inputsIt)[i];
    std::string field = (where + ": field 'inputs[" + Twine(i) + "]'").str();
    if (!ref.is_string())
      return fail(loc, field + " must be a string");
    FailureOr<Value> value = lookup(ref.get<std::string>(), field, loc);
    if (failed(value))
      return failure();
    operands.push_back(*value);
  }
  return success();
}

LogicalResult GraphImporter::importAttr(const std::string &key,
                                        const json &value, AttrKind kind,
                                        const std::string &field, Location loc,
                                        NamedAttrList &attrs) {
  switch (kind) {
  case AttrKind::Unit:
    if (!value.is_boolean())
      return fail(loc, field + " must be true or false");
    if (value.get<bool>())
      attrs.append(key, builder.getUnitAttr());
    return success();
  case AttrKind::F64:
    if (!value.is_number())
      return fail(loc, field + " must be a number");
    attrs.append(key, builder.getF64FloatAttr(value.get<double>()));
    return success();
  case AttrKind::I64:
    if (!isInt64(value))
      return fail(loc, field + " must be an integer in the int64 range");
    attrs.append(key, builder.getI64IntegerAttr(value.get<int64_t>()));
    return success();
  case AttrKind::I64Array: {
    if (!value.is_array())
      return fail(loc, field + " must be an array of integers");
    std::optional<SmallVector<int64_t>> ints =
        elementsOf<int64_t>(value, isInt64);
    if (!ints)
      return fail(loc, field + " must be an array of int64 integers");
    attrs.append(key, builder.getDenseI64ArrayAttr(*ints));
    return success();
  }
  case AttrKind::F64Array: {
    std::optional<SmallVector<double>> numbers =
        elementsOf<double>(value, [](const json &v) { return v.is_number(); });
    if (!numbers)
      return fail(loc, field + " must be an array of numbers");
    attrs.append(key, builder.getDenseF64ArrayAttr(*numbers));
    return success();
  }
  case AttrKind::String:
    if (!value.is_string())
      return fail(loc, field + " must be a string");
    attrs.append(key, builder.getStringAttr(value.get<std::string>()));
    return success();
  case AttrKind::Dtype: {
    Type dtype = parseDtype(value, /*allowInt=*/false);
    if (!dtype)
      return fail(loc, field + " must be one of f32, bf16, f16");
    attrs.append(key, TypeAttr::get(dtype));
    return success();
  }
  }
  return success();
}

LogicalResult GraphImporter::importAttrs(const json &node, const OpInfo &info,
                                         OperationName mlirName,
                                         const std::string &where, Location loc,
                                         NamedAttrList &attrs) {
  StringRef opName = mlirName.stripDialect();
  if (auto attrsIt = node.find("attrs"); attrsIt != node.end()) {
    if (!attrsIt->is_object())
      return fail(loc, where + ": field 'attrs' must be an object");
    for (auto &[key, value] : attrsIt->items()) {
      const std::string &name = key;
      const ImportAttr *attr = llvm::find_if(
          info.attrs, [&](const ImportAttr &a) { return a.name == name; });
      if (attr == info.attrs.end())
        return fail(loc, where + ": op '" + opName + "' has no attribute '" +
                             name + "'");
      if (failed(importAttr(name, value, attr->kind,
                            where + ": field 'attrs." + name + "'", loc,
                            attrs)))
        return failure();
    }
  }
  for (const ImportAttr &attr : info.attrs)
    if (attr.required && !attrs.get(attr.name))
      return fail(loc, where + ": missing attribute 'attrs." + attr.name + "'");
  // The shape rules read defaulted attributes (cross_entropy's reduction).
  mlirName.populateDefaultAttrs(attrs);
  if (auto moduleIt = node.find("module"); moduleIt != node.end()) {
    if (!moduleIt->is_string())
      return fail(loc, where + ": field 'module' must be a string");
    attrs.append("path", builder.getStringAttr(moduleIt->get<std::string>()));
  }
  return success();
}

LogicalResult GraphImporter::importNode(const json &node, size_t index,
                                        size_t &cursor) {
  std::string where = ("nodes[" + Twine(index) + "]").str();
  if (node.is_object() && node.contains("name") && node["name"].is_string()) {
    size_t at = findQuoted(node["name"].get<std::string>(), cursor);
    if (at != StringRef::npos)
      cursor = at;
    where = "node '" + node["name"].get<std::string>() + "'";
  }
  FileLineColLoc loc = fileLoc(cursor);
  std::string name;
  if (failed(checkName(node, where, loc, name)))
    return failure();
  for (auto &[key, _] : node.items())
    if (key != "name" && key != "op" && key != "inputs" && key != "attrs" &&
        key != "module")
      return fail(loc, where + ": unknown field '" + key + "'");

  std::string opName;
  FailureOr<const OpInfo *> info = opInfo(node, where, loc, opName);
  SmallVector<Value> operands;
  if (failed(info) ||
      failed(importOperands(node, **info, where, loc, operands)))
    return failure();
  OperationName mlirName("nn." + opName, context);
  NamedAttrList attrs;
  if (failed(importAttrs(node, **info, mlirName, where, loc, attrs)))
    return failure();

  // Result types from the op's own rules; its diagnostics are re-issued with
  // the node's name so the user knows where in the graph to look.
  Location opLoc = NameLoc::get(builder.getStringAttr(name), loc);
  std::string opError;
  Operation *op = nullptr;
  bool valid = false;
  {
    ScopedDiagnosticHandler capture(context, [&](Diagnostic &diag) {
      if (opError.empty())
        opError = diag.str();
      return success();
    });
    op = fsdp::nn::createWithShapeRule(builder, opLoc, mlirName, operands,
                                       attrs.getDictionary(context));
    valid = op && succeeded(verify(op, /*verifyRecursively=*/false));
  }
  if (!valid) {
    if (op)
      op->erase();
    return fail(loc, where + ": " + opError);
  }
  values[name] = SmallVector<Value>(op->getResults());
  return success();
}

OwningOpRef<ModuleOp> GraphImporter::run() {
  context->loadDialect<fsdp::nn::NNDialect, func::FuncDialect>();
  json root;
  try {
    root = json::parse(text.begin(), text.end());
  } catch (const json::parse_error &e) {
    // nlohmann's text repeats the position we report and starts with its
    // internal id; keep only the description.
    StringRef what = e.what();
    size_t colon = what.find(": ", what.find("column"));
    (void)fail(fileLoc(e.byte ? e.byte - 1 : 0),
               "malformed JSON: " + (colon == StringRef::npos
                                         ? what
                                         : what.drop_front(colon + 2)));
    return {};
  } catch (const json::exception &e) {
    StringRef what = e.what();
    (void)fail("malformed JSON: " +
               what.drop_front(what.find(']') + 1).ltrim());
    return {};
  }
  if (!root.is_object())
    return (void)fail("expected a JSON object at the top level"), nullptr;
  for (auto &[key, _] : root.items())
    if (key != "format" && key != "version" && key != "model" &&
        key != "inputs" && key != "parameters" && key != "nodes" &&
        key != "outputs")
      return (void)fail(fileLoc(findQuoted(key, 0)),
                        "unknown top-level field '" + key + "'"),
             nullptr;
  if (!root.contains("format"))
    return (void)fail("missing field 'format' (\"fsdp-graph\")"), nullptr;
  if (root["format"] != "fsdp-graph")
    return (void)fail(fileLoc(findQuoted("format", 0)),
                      "field 'format' must be \"fsdp-graph\", got " +
                          root["format"].dump()),
           nullptr;
  if (!root.contains("version"))
    return (void)fail("missing field 'version'"), nullptr;
  if (!root["version"].is_number_integer())
    return (void)fail(fileLoc(findQuoted("version", 0)),
                      "field 'version' must be an integer, got " +
                          root["version"].dump()),
           nullptr;
  if (root["version"].get<int64_t>() != 1)
    return (void)fail(fileLoc(findQuoted("version", 0)),
                      "unsupported version " + root["version"].dump() +
                          ", this importer reads version 1"),
           nullptr;
  for (const char *key : {"inputs", "parameters", "nodes", "outputs"}) {
    if (!root.contains(key))
      return (void)fail(std::string("missing field '") + key + "'"), nullptr;
    if (!root[key].is_array())
      return (void)fail(fileLoc(findQuoted(key, 0)),
                        std::string("field '") + key + "' must be an array"),
             nullptr;
  }
  if (root.contains("model") && !root["model"].is_string())
    return (void)fail("field 'model' must be a string"), nullptr;

  Location fileLocation = fileLoc(0);
  OwningOpRef<ModuleOp> module = ModuleOp::create(fileLocation);
  builder.setInsertionPointToEnd(module->getBody());
  auto func = func::FuncOp::create(builder, fileLocation, "forward",
                                   builder.getFunctionType({}, {}));
  Block *body = func.addEntryBlock();
  if (failed(importTensors(root, func)))
    return {};

  builder.setInsertionPointToEnd(body);
  size_t cursor = findQuoted("nodes", 0);
  const json &nodes = root["nodes"];
  for (size_t i = 0; i < nodes.size(); ++i)
    if (failed(importNode(nodes[i], i, cursor)))
      return {};

  const json &outputs = root["outputs"];
  if (outputs.empty())
    return (void)fail("field 'outputs' must name at least one value"), nullptr;
  SmallVector<Value> results;
  SmallVector<DictionaryAttr> resultAttrs;
  size_t outCursor = findQuoted("outputs", 0);
  for (size_t i = 0; i < outputs.size(); ++i) {
    const json &out = outputs[i];
    std::string where = ("outputs[" + Twine(i) + "]").str();
    Location loc = fileLoc(outCursor);
    if (!out.is_object() || !out.contains("name") || !out["name"].is_string() ||
        !out.contains("value") || !out["value"].is_string())
      return (void)fail(loc, where + ": expected {\"name\": string, "
                                     "\"value\": string}"),
             nullptr;
    FailureOr<Value> value =
        lookup(out["value"].get<std::string>(), where + ": field 'value'", loc);
    if (failed(value))
      return {};
    results.push_back(*value);
    resultAttrs.push_back(builder.getDictionaryAttr(builder.getNamedAttr(
        fsdp::nn::NNDialect::kOutputAttrName,
        builder.getStringAttr(out["name"].get<std::string>()))));
  }
  func::ReturnOp::create(builder, fileLocation, results);
  func.setFunctionType(
      builder.getFunctionType(argTypes, TypeRange(ValueRange(results))));
  func.setAllArgAttrs(argAttrs);
  func.setAllResultAttrs(resultAttrs);
  if (root.contains("model"))
    func->setAttr(fsdp::nn::NNDialect::kModelAttrName,
                  builder.getStringAttr(root["model"].get<std::string>()));
  if (failed(verify(*module)))
    return {};
  return module;
}

} // namespace

OwningOpRef<ModuleOp> fsdp::importGraph(StringRef json, StringRef filename,
                                        MLIRContext *context) {
  return GraphImporter(json, filename, context).run();
}
