//===- fsdp-graphgen.cpp - Hugging Face config to graph.json ----*- C++ -*-===//
//
// Part of the fsdp-mlir project.
//
//===----------------------------------------------------------------------===//
//
// Writes the forward graph (docs/graph-format.md) of the model that a Hugging
// Face config.json describes:
//
//   fsdp-graphgen CONFIG.json [--batch N] [--seq N] [--dtype f32|bf16|f16]
//                 [--packed] [-o OUT.json]
//
// --packed: rows hold several documents, position_ids restarting at 0 where
// each starts; every attention sees only its query's document.
//
// The graph goes to OUT.json, or to stdout without -o or with `-o -`. Then
// two summary lines are printed, to stdout when the graph went to a file and
// to stderr otherwise, so they never mix with the JSON:
//
//   parameters: 8030261248
//   model: LlamaForCausalLM layers: 32 hidden: 4096
//
// Errors are reported as `fsdp-graphgen: error: <file>: <message>` and exit 1.
//
//===----------------------------------------------------------------------===//

#include "fsdp/Import/GraphGen.h"

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

using json = nlohmann::json;

namespace {

constexpr const char *kUsage =
    "usage: fsdp-graphgen CONFIG.json [--batch N] [--seq N] "
    "[--dtype f32|bf16|f16] [--packed] [-o OUT.json]\n";

/// Prints `fsdp-graphgen: error: <message>` and returns the exit code.
int reportError(const std::string &message) {
  std::cerr << "fsdp-graphgen: error: " << message << "\n";
  return 1;
}

/// Finds the first syntax error of a JSON text without building a document,
/// so the message is available even when exceptions are disabled.
class SyntaxErrorFinder : public nlohmann::json_sax<json> {
public:
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t &) override { return true; }
  bool string(string_t &) override { return true; }
  bool binary(binary_t &) override { return true; }
  bool start_object(std::size_t) override { return true; }
  bool key(string_t &) override { return true; }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string &,
                   const json::exception &error) override {
    message = error.what();
    // Drop the "[json.exception.parse_error.101] " prefix.
    if (!message.empty() && message[0] == '[') {
      size_t end = message.find("] ");
      if (end != std::string::npos)
        message = message.substr(end + 2);
    }
    return false;
  }

  std::string message;
};

/// Parses a positive count for `flag`; reports and returns false if invalid.
bool parseCount(const std::string &flag, const std::string &text,
                int64_t &value) {
  errno = 0;
  char *end = nullptr;
  long long parsed = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE || parsed < 1 ||
      parsed > INT32_MAX) {
    reportError("option '" + flag + "' expects a positive integer, got '" +
                text + "'");
    return false;
  }
  value = parsed;
  return true;
}

} // namespace

int main(int argc, char **argv) {
  std::string inputPath, outputPath = "-";
  fsdp::GraphGenOptions options;

  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::cout << kUsage;
      return 0;
    }
    // Options take their value as the next argument or after '='.
    std::string flag = arg, value;
    bool hasValue = false;
    if (arg.rfind("--", 0) == 0) {
      size_t eq = arg.find('=');
      if (eq != std::string::npos) {
        flag = arg.substr(0, eq);
        value = arg.substr(eq + 1);
        hasValue = true;
      }
    }
    if (arg == "--packed") {
      options.packed = true;
      continue;
    }
    bool known = flag == "--batch" || flag == "--seq" || flag == "--dtype" ||
                 flag == "-o";
    if (!known) {
      if (arg.size() > 1 && arg[0] == '-') {
        reportError("unknown option '" + arg + "'");
        std::cerr << kUsage;
        return 1;
      }
      if (!inputPath.empty()) {
        reportError("unexpected argument '" + arg +
                    "' (only one config file is accepted)");
        std::cerr << kUsage;
        return 1;
      }
      inputPath = arg;
      continue;
    }
    if (!hasValue) {
      if (i + 1 == argc) {
        reportError("option '" + flag + "' expects a value");
        std::cerr << kUsage;
        return 1;
      }
      value = argv[++i];
    }
    if (flag == "--batch") {
      if (!parseCount(flag, value, options.batch))
        return 1;
    } else if (flag == "--seq") {
      if (!parseCount(flag, value, options.seq))
        return 1;
    } else if (flag == "--dtype") {
      if (value != "f32" && value != "bf16" && value != "f16")
        return reportError("option '--dtype' expects f32, bf16 or f16, got '" +
                           value + "'");
      options.dtype = value;
    } else {
      outputPath = value;
    }
  }
  if (inputPath.empty()) {
    reportError("no config file given");
    std::cerr << kUsage;
    return 1;
  }

  std::error_code ec;
  if (std::filesystem::is_directory(inputPath, ec))
    return reportError(inputPath + ": is a directory, expected a config file");
  std::ifstream input(inputPath, std::ios::binary);
  if (!input)
    return reportError(inputPath +
                       ": cannot open file: " + std::strerror(errno));
  std::stringstream buffer;
  buffer << input.rdbuf();
  std::string text = buffer.str();

  json config = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded()) {
    SyntaxErrorFinder finder;
    json::sax_parse(text, &finder);
    return reportError(inputPath + ": invalid JSON: " + finder.message);
  }

  fsdp::GraphGenResult result = fsdp::generateGraph(config, options);
  if (!result.succeeded())
    return reportError(inputPath + ": " + result.error);
  for (const std::string &warning : result.warnings)
    std::cerr << "fsdp-graphgen: warning: " << inputPath << ": " << warning
              << "\n";

  std::string graphText = fsdp::printGraph(result.graph);
  bool toStdout = outputPath == "-";
  if (toStdout) {
    std::cout << graphText << std::flush;
    if (!std::cout)
      return reportError("cannot write the graph to stdout");
  } else {
    std::ofstream output(outputPath, std::ios::binary);
    if (output)
      output << graphText;
    output.close();
    if (!output)
      return reportError(outputPath +
                         ": cannot write file: " + std::strerror(errno));
  }

  std::ostream &summary = toStdout ? std::cerr : std::cout;
  summary << "parameters: " << fsdp::countParameters(result.graph) << "\n"
          << "model: " << result.architecture << " layers: " << result.numLayers
          << " hidden: " << result.hiddenSize << "\n";
  return 0;
}
