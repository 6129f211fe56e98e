//===- GraphGen.cpp - graph.json from a Hugging Face config -----*- C++ -*-===//
//
// Part of the fsdp-mlir project.
//
//===----------------------------------------------------------------------===//
//
// The config is read into a ModelConfig first (every field checked, defaults
// filled in as the transformers config classes do), then a family-specific
// builder writes the parameters in `named_parameters()` order and the nodes
// in the order the Hugging Face forward computes them.
//
// The code does not use exceptions, so that it also builds with LLVM's
// -fno-exceptions: every JSON access checks the type first.
//
//===----------------------------------------------------------------------===//

#include "fsdp/Import/GraphGen.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <optional>
#include <sstream>
#include <utility>

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace fsdp {
namespace {

using Shape = std::vector<int64_t>;

/// Config dimensions are capped so that products of two of them cannot
/// overflow int64_t.
constexpr int64_t kMaxDim = INT32_MAX;

/// The graph holds every layer's nodes in memory; real models have at most a
/// few hundred layers, so a larger count is taken for a typo.
constexpr int64_t kMaxLayers = 4096;

/// Renders a JSON value for a diagnostic, shortened when long.
std::string describe(const json &value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 40)
    text = text.substr(0, 37) + "...";
  return text;
}

//===----------------------------------------------------------------------===//
// ConfigReader
//===----------------------------------------------------------------------===//

/// Reads typed fields of one JSON object. The first problem found is kept in
/// `error`; later reads return their fallback so callers can read a whole
/// group of fields and check once.
class ConfigReader {
public:
  /// `prefix` is prepended to field names in diagnostics (for nested objects).
  explicit ConfigReader(const json &object, std::string prefix = "")
      : object(object), prefix(std::move(prefix)) {}

  /// Returns the field, or nullptr when it is absent or null (transformers
  /// treats both as "use the default").
  const json *lookup(const char *key) const {
    auto it = object.find(key);
    if (it == object.end() || it->is_null())
      return nullptr;
    return &*it;
  }

  /// A required integer field in [minValue, maxValue].
  int64_t getInt(const char *key, int64_t minValue = 1,
                 int64_t maxValue = kMaxDim) {
    const json *value = lookup(key);
    if (!value) {
      fail(object.contains(key) ? "field '" + name(key) + "' must not be null"
                                : "missing field '" + name(key) + "'");
      return minValue;
    }
    return checkInt(key, *value, minValue, maxValue);
  }

  /// An optional integer field in [minValue, kMaxDim].
  std::optional<int64_t> getOptionalInt(const char *key, int64_t minValue = 1) {
    const json *value = lookup(key);
    if (!value)
      return std::nullopt;
    return checkInt(key, *value, minValue);
  }

  /// An optional integer field; `fallback` only when the key is absent, while
  /// an explicit null yields nullopt (e.g. `"sliding_window": null`).
  std::optional<int64_t> getNullableInt(const char *key, int64_t fallback) {
    if (!object.contains(key))
      return fallback;
    return getOptionalInt(key);
  }

  /// An optional number, which must be finite and above (or, with
  /// `allowZero`, at least) zero.
  double getNumber(const char *key, double fallback, bool allowZero = false) {
    const json *value = lookup(key);
    if (!value)
      return fallback;
    if (!value->is_number()) {
      fail("field '" + name(key) + "' must be a number, got " +
           describe(*value));
      return fallback;
    }
    double number = value->get<double>();
    if (!std::isfinite(number) || number < 0 || (number == 0 && !allowZero)) {
      fail("field '" + name(key) + "' must be a " +
           (allowZero ? "non-negative" : "positive") + " number, got " +
           describe(*value));
      return fallback;
    }
    return number;
  }

  /// An optional boolean field.
  bool getBool(const char *key, bool fallback) {
    const json *value = lookup(key);
    if (!value)
      return fallback;
    if (!value->is_boolean()) {
      fail("field '" + name(key) + "' must be true or false, got " +
           describe(*value));
      return fallback;
    }
    return value->get<bool>();
  }

  /// An optional string field.
  std::string getString(const char *key, const std::string &fallback) {
    const json *value = lookup(key);
    if (!value)
      return fallback;
    if (!value->is_string()) {
      fail("field '" + name(key) + "' must be a string, got " +
           describe(*value));
      return fallback;
    }
    return value->get<std::string>();
  }

  /// Records `message` unless an earlier error is already recorded.
  void fail(std::string message) {
    if (error.empty())
      error = std::move(message);
  }

  /// The field's name as diagnostics spell it.
  std::string name(const char *key) const { return prefix + key; }

  bool failed() const { return !error.empty(); }

  std::string error;

private:
  int64_t checkInt(const char *key, const json &value, int64_t minValue,
                   int64_t maxValue = kMaxDim) {
    if (!value.is_number_integer()) {
      fail("field '" + name(key) + "' must be an integer, got " +
           describe(value));
      return minValue;
    }
    std::string tooLarge = "field '" + name(key) + "' is too large, got " +
                           describe(value) + " (at most " +
                           std::to_string(maxValue) + ")";
    // Unsigned values above INT64_MAX must not wrap into range.
    if (value.is_number_unsigned() &&
        value.get<uint64_t>() > static_cast<uint64_t>(maxValue)) {
      fail(tooLarge);
      return minValue;
    }
    int64_t number = value.get<int64_t>();
    if (number < minValue) {
      fail("field '" + name(key) + "' must be " +
           (minValue == 1 ? std::string("a positive integer")
                          : "an integer >= " + std::to_string(minValue)) +
           ", got " + describe(value));
      return minValue;
    }
    if (number > maxValue) {
      fail(tooLarge);
      return minValue;
    }
    return number;
  }

  const json &object;
  std::string prefix;
};

//===----------------------------------------------------------------------===//
// ModelConfig
//===----------------------------------------------------------------------===//

enum class Family { Llama, Mistral, Qwen2, Qwen3, Qwen3Moe, Mixtral, GPT2 };

/// The architectures generateGraph() accepts and their families.
const std::vector<std::pair<std::string, Family>> &getArchitectureTable() {
  static const std::vector<std::pair<std::string, Family>> table = {
      {"LlamaForCausalLM", Family::Llama},
      {"MistralForCausalLM", Family::Mistral},
      {"Qwen2ForCausalLM", Family::Qwen2},
      {"Qwen3ForCausalLM", Family::Qwen3},
      {"Qwen3MoeForCausalLM", Family::Qwen3Moe},
      {"MixtralForCausalLM", Family::Mixtral},
      {"GPT2LMHeadModel", Family::GPT2},
  };
  return table;
}

/// Everything the builders need, with defaults resolved and checked.
struct ModelConfig {
  Family family = Family::Llama;
  std::string architecture;
  int64_t vocab = 0;
  int64_t hidden = 0;
  int64_t intermediate = 0;
  int64_t layers = 0;
  int64_t heads = 0;
  int64_t kvHeads = 0;
  int64_t headDim = 0;
  double normEps = 0;
  double initStd = 0.02;
  bool tieEmbeddings = false;

  // Llama-like models.
  double ropeTheta = 10000.0;
  /// A scaled RoPE's frequencies (empty: theta's) and attention factor.
  std::vector<double> ropeInvFreq;
  double ropeAttentionScaling = 1.0;
  bool qkvBias = false;
  bool outBias = false;
  bool mlpBias = false;
  bool qkNorm = false;
  /// Sliding window of each layer, nullopt for full causal attention.
  std::vector<std::optional<int64_t>> windows;

  // Mixture of experts (Qwen3-MoE, Mixtral): the experts of each sparse
  // layer, the experts a token uses, and each expert's MLP width.
  int64_t experts = 0;
  int64_t topK = 0;
  int64_t moeIntermediate = 0;
  /// Whether the top-k weights are renormalized to sum to 1.
  bool normTopK = false;
  /// Every `sparseStep`-th layer is sparse, except `mlpOnlyLayers`.
  int64_t sparseStep = 1;
  std::vector<int64_t> mlpOnlyLayers;
  /// `output_router_logits`: the load-balancing loss, `auxCoef` times it, is
  /// added to the training loss.
  bool routerLogits = false;
  double auxCoef = 0.001;
  /// Whether layer `l`'s MLP is a mixture of experts.
  bool isSparse(int64_t l) const {
    return experts > 0 && (l + 1) % sparseStep == 0 &&
           std::find(mlpOnlyLayers.begin(), mlpOnlyLayers.end(), l) ==
               mlpOnlyLayers.end();
  }

  // GPT-2.
  int64_t maxPositions = 0;
  std::string geluApproximate;
  bool scaleAttnWeights = true;
  bool scaleByInverseLayerIdx = false;
};

/// Reads `architectures[0]` and maps it to a family.
bool readArchitecture(const json &config, ModelConfig &model,
                      std::string &error) {
  auto it = config.find("architectures");
  if (it == config.end()) {
    error = "missing field 'architectures'";
    return false;
  }
  if (!it->is_array() || it->empty() || !(*it)[0].is_string()) {
    error = "field 'architectures' must be a non-empty array of strings, got " +
            describe(*it);
    return false;
  }
  model.architecture = (*it)[0].get<std::string>();
  for (const auto &[name, family] : getArchitectureTable()) {
    if (name == model.architecture) {
      model.family = family;
      return true;
    }
  }
  error = "unsupported architecture '" + model.architecture +
          "' in field 'architectures' (supported: ";
  const std::vector<std::string> &names = getSupportedArchitectures();
  for (size_t i = 0, e = names.size(); i != e; ++i)
    error += (i ? ", " : "") + names[i];
  error += ")";
  return false;
}

/// Reads the per-layer sliding windows of Qwen2/Qwen3. As in transformers, a
/// window applies only with `use_sliding_window`, and then to the layers that
/// `layer_types` marks "sliding_attention", or (without `layer_types`) to the
/// layers from `max_window_layers` on.
void readQwenWindows(const json &config, ConfigReader &reader,
                     ModelConfig &model) {
  bool useWindow = reader.getBool("use_sliding_window", false);
  std::optional<int64_t> window = reader.getNullableInt("sliding_window", 4096);
  int64_t maxWindowLayers =
      reader.getOptionalInt("max_window_layers", 0).value_or(28);
  model.windows.assign(model.layers, std::nullopt);

  auto types = config.find("layer_types");
  bool hasTypes = types != config.end() && !types->is_null();
  if (hasTypes && (!types->is_array() ||
                   types->size() != static_cast<size_t>(model.layers))) {
    reader.fail("field 'layer_types' must be an array of " +
                std::to_string(model.layers) +
                " strings (one per layer), got " + describe(*types));
    return;
  }
  for (int64_t l = 0; l < model.layers; ++l) {
    bool sliding = l >= maxWindowLayers;
    if (hasTypes) {
      const json &type = (*types)[l];
      if (type != "full_attention" && type != "sliding_attention") {
        reader.fail("field 'layer_types' entry " + std::to_string(l) +
                    " must be \"full_attention\" or \"sliding_attention\", "
                    "got " +
                    describe(type));
        return;
      }
      sliding = type == "sliding_attention";
    }
    if (useWindow && window && sliding)
      model.windows[l] = window;
  }
}

/// Computes a scaled RoPE's frequencies from `rope_scaling` (or
/// transformers 5's `rope_parameters`), as transformers 5.25's
/// modeling_rope_utils does for `linear`, `llama3` and `yarn`. Any other
/// type, or a field that version would not read, is an error: a silently
/// different rotation would train a different model.
void readRopeScaling(ConfigReader &reader, ModelConfig &model) {
  const char *field = "rope_scaling";
  const json *scaling = reader.lookup(field);
  if (!scaling) {
    field = "rope_parameters";
    scaling = reader.lookup(field);
  }
  if (!scaling)
    return;
  if (!scaling->is_object()) {
    reader.fail("field '" + std::string(field) +
                "' must be an object or null, got " + describe(*scaling));
    return;
  }
  ConfigReader nested(*scaling, std::string(field) + ".");
  std::string type = nested.getString(
      "rope_type", nested.getString("type", std::string("default")));
  if (nested.failed())
    return reader.fail(nested.error);
  std::vector<std::string> known = {"rope_type", "type", "rope_theta"};
  for (const char *key : {"factor", "low_freq_factor", "high_freq_factor"})
    if (type != "default" && !nested.lookup(key) &&
        (std::string(key) == "factor" || type == "llama3"))
      return reader.fail("missing field '" + std::string(field) + "." + key +
                         "' for rope type '" + type + "'");
  int64_t half = model.headDim / 2, dim = model.headDim;
  std::vector<double> freq(half);
  for (int64_t i = 0; i < half; ++i)
    freq[i] = std::pow(model.ropeTheta, -2.0 * double(i) / double(dim));
  if (type == "default") {
    // Theta's frequencies.
  } else if (type == "linear") {
    double factor = nested.getNumber("factor", 1.0);
    for (double &f : freq)
      f /= factor;
    known.push_back("factor");
  } else if (type == "llama3") {
    double factor = nested.getNumber("factor", 0.0);
    double low = nested.getNumber("low_freq_factor", 0.0);
    double high = nested.getNumber("high_freq_factor", 0.0);
    double context = double(nested.getInt("original_max_position_embeddings"));
    if (!nested.failed() && !(high > low))
      nested.fail("field '" + std::string(field) +
                  ".high_freq_factor' must be larger than low_freq_factor");
    for (double &f : freq) {
      double wavelen = 2 * M_PI / f;
      if (wavelen > context / low) {
        f /= factor;
      } else if (wavelen >= context / high) {
        double smooth = (context / wavelen - low) / (high - low);
        f = (1 - smooth) * f / factor + smooth * f;
      }
    }
    known.insert(known.end(), {"factor", "low_freq_factor", "high_freq_factor",
                               "original_max_position_embeddings"});
  } else if (type == "yarn") {
    double factor = nested.getNumber("factor", 0.0);
    model.ropeAttentionScaling = 0.1 * std::log(factor) + 1.0;
    if (nested.lookup("attention_factor"))
      model.ropeAttentionScaling =
          nested.getNumber("attention_factor", model.ropeAttentionScaling);
    double fast = nested.getNumber("beta_fast", 32.0);
    double slow = nested.getNumber("beta_slow", 1.0);
    // The pretrained context: transformers 5 saves it in the rope
    // parameters (the model's own when converting an older config).
    int64_t positions = reader.getInt("max_position_embeddings");
    if (nested.lookup("original_max_position_embeddings"))
      positions = nested.getInt("original_max_position_embeddings");
    bool truncate = nested.getBool("truncate", true);
    // The dimension index at which a wavelength makes `rotations` turns
    // over the context, and the ramp between the two bounds.
    auto correction = [&](double rotations) {
      return dim * std::log(double(positions) / (rotations * 2 * M_PI)) /
             (2 * std::log(model.ropeTheta));
    };
    double lo = correction(fast), hi = correction(slow);
    if (truncate) {
      lo = std::floor(lo);
      hi = std::ceil(hi);
    }
    lo = std::max(lo, 0.0);
    hi = std::min(hi, double(dim - 1));
    if (lo == hi)
      hi += 0.001;
    for (int64_t i = 0; i < half; ++i) {
      double ramp = std::clamp((double(i) - lo) / (hi - lo), 0.0, 1.0);
      double extrapolation = 1.0 - ramp;
      freq[i] =
          freq[i] / factor * (1 - extrapolation) + freq[i] * extrapolation;
    }
    known.insert(known.end(),
                 {"factor", "attention_factor", "beta_fast", "beta_slow",
                  "original_max_position_embeddings", "truncate"});
  } else {
    return reader.fail("field '" + std::string(field) + "' has rope type '" +
                       type +
                       "', but only 'default', 'linear', 'llama3' and 'yarn' "
                       "are supported");
  }
  if (nested.failed())
    return reader.fail(nested.error);
  for (const auto &[key, value] : scaling->items())
    if (!value.is_null() &&
        std::find(known.begin(), known.end(), key) == known.end())
      return reader.fail("field '" + std::string(field) + "." + key +
                         "' is not supported for rope type '" + type + "'");
  if (type != "default")
    model.ropeInvFreq = std::move(freq);
}

/// Reads the experts of a Qwen3-MoE or Mixtral config, with transformers
/// 5.25's defaults.
void readMixtureOfExperts(const json &config, ConfigReader &reader,
                          ModelConfig &model) {
  if (model.family == Family::Qwen3Moe) {
    model.experts = reader.getOptionalInt("num_experts", 0).value_or(128);
    model.topK = reader.getOptionalInt("num_experts_per_tok").value_or(8);
    model.moeIntermediate =
        reader.getOptionalInt("moe_intermediate_size").value_or(768);
    model.normTopK = reader.getBool("norm_topk_prob", false);
    model.sparseStep = reader.getOptionalInt("decoder_sparse_step").value_or(1);
    auto only = config.find("mlp_only_layers");
    if (only != config.end() && !only->is_null()) {
      if (!only->is_array())
        return reader.fail("field 'mlp_only_layers' must be an array of "
                           "layer indices, got " +
                           describe(*only));
      for (const json &layer : *only) {
        if (!layer.is_number_integer() || layer.get<int64_t>() < 0 ||
            layer.get<int64_t>() >= model.layers)
          return reader.fail("field 'mlp_only_layers' entry " +
                             describe(layer) + " is not a layer index in [0, " +
                             std::to_string(model.layers) + ")");
        model.mlpOnlyLayers.push_back(layer.get<int64_t>());
      }
    }
  } else {
    model.experts = reader.getOptionalInt("num_local_experts").value_or(8);
    model.topK = reader.getOptionalInt("num_experts_per_tok").value_or(2);
    model.moeIntermediate = model.intermediate;
    model.normTopK = true;
    // Jitter multiplies the hidden states by noise while training.
    double jitter = reader.getNumber("router_jitter_noise", 0.0, true);
    if (jitter != 0.0)
      return reader.fail("field 'router_jitter_noise' is " +
                         (std::ostringstream() << jitter).str() +
                         ", but only 0 is supported (the compiled step draws "
                         "no router noise)");
  }
  model.routerLogits = reader.getBool("output_router_logits", false);
  model.auxCoef = reader.getNumber("router_aux_loss_coef", 0.001, true);
  if (reader.failed())
    return;
  if (model.experts > 0 && model.topK > model.experts)
    reader.fail("field 'num_experts_per_tok' (" + std::to_string(model.topK) +
                ") exceeds the " + std::to_string(model.experts) + " experts");
}

/// Reads a Llama, Mistral, Qwen2, Qwen3, Qwen3-MoE or Mixtral config.
void readLlamaLike(const json &config, ConfigReader &reader,
                   ModelConfig &model) {
  Family family = model.family;
  model.vocab = reader.getInt("vocab_size");
  model.hidden = reader.getInt("hidden_size");
  model.intermediate = reader.getInt("intermediate_size");
  model.layers = reader.getInt("num_hidden_layers", 1, kMaxLayers);
  model.heads = reader.getInt("num_attention_heads");
  model.kvHeads =
      reader.getOptionalInt("num_key_value_heads").value_or(model.heads);
  // Qwen3Config defaults head_dim to 128; the others (Qwen3-MoE too) derive
  // it.
  std::optional<int64_t> headDim = family == Family::Qwen3
                                       ? reader.getNullableInt("head_dim", 128)
                                       : reader.getOptionalInt("head_dim");
  model.normEps = reader.getNumber("rms_norm_eps", 1e-6, /*allowZero=*/true);
  model.initStd = reader.getNumber("initializer_range", 0.02);
  model.tieEmbeddings = reader.getBool("tie_word_embeddings", false);
  std::string act = reader.getString("hidden_act", "silu");

  // transformers 5 moves rope_theta into rope_parameters.
  model.ropeTheta = 10000.0;
  if (reader.lookup("rope_theta")) {
    model.ropeTheta = reader.getNumber("rope_theta", model.ropeTheta);
  } else if (const json *params = reader.lookup("rope_parameters")) {
    if (!params->is_object()) {
      reader.fail("field 'rope_parameters' must be an object, got " +
                  describe(*params));
    } else {
      ConfigReader nested(*params, "rope_parameters.");
      model.ropeTheta = nested.getNumber("rope_theta", model.ropeTheta);
      reader.fail(nested.error);
    }
  }

  switch (family) {
  case Family::Llama:
    model.qkvBias = model.outBias = reader.getBool("attention_bias", false);
    model.mlpBias = reader.getBool("mlp_bias", false);
    model.windows.assign(model.layers, std::nullopt);
    break;
  case Family::Mistral: {
    // MistralAttention has no biases; the window applies to every layer.
    std::optional<int64_t> window =
        reader.getNullableInt("sliding_window", 4096);
    model.windows.assign(model.layers, window);
    break;
  }
  case Family::Qwen2:
    // Qwen2Attention always has q/k/v biases and never an o_proj bias.
    model.qkvBias = true;
    readQwenWindows(config, reader, model);
    break;
  case Family::Qwen3:
    model.qkvBias = model.outBias = reader.getBool("attention_bias", false);
    model.qkNorm = true;
    readQwenWindows(config, reader, model);
    break;
  case Family::Qwen3Moe: {
    // Qwen3MoeConfig keeps sliding_window only with use_sliding_window,
    // and then every layer's attention uses it.
    model.qkvBias = model.outBias = reader.getBool("attention_bias", false);
    model.qkNorm = true;
    std::optional<int64_t> window =
        reader.getNullableInt("sliding_window", 4096);
    bool useWindow = reader.getBool("use_sliding_window", false);
    model.windows.assign(model.layers,
                         useWindow ? window : std::optional<int64_t>());
    break;
  }
  case Family::Mixtral:
    // MixtralAttention has no biases; its window (none by default) applies
    // to every layer.
    model.windows.assign(model.layers, reader.getOptionalInt("sliding_window"));
    break;
  case Family::GPT2:
    break;
  }
  if (reader.failed())
    return;

  if (act != "silu") {
    reader.fail("field 'hidden_act' is '" + act +
                "', but only 'silu' is supported for " + model.architecture);
    return;
  }
  if (model.heads % model.kvHeads != 0) {
    reader.fail("field 'num_key_value_heads' (" +
                std::to_string(model.kvHeads) +
                ") does not divide field 'num_attention_heads' (" +
                std::to_string(model.heads) + ")");
    return;
  }
  if (headDim) {
    model.headDim = *headDim;
  } else if (model.hidden % model.heads != 0) {
    reader.fail("field 'num_attention_heads' (" + std::to_string(model.heads) +
                ") does not divide field 'hidden_size' (" +
                std::to_string(model.hidden) + ") and no 'head_dim' is given");
    return;
  } else {
    model.headDim = model.hidden / model.heads;
  }
  // Rotary embeddings rotate the two halves of each head.
  if (model.headDim % 2 != 0)
    return reader.fail((headDim ? "field 'head_dim'"
                                : "'hidden_size' / 'num_attention_heads'") +
                       std::string(" (") + std::to_string(model.headDim) +
                       ") must be even for rotary embeddings");
  readRopeScaling(reader, model);
  if (family == Family::Qwen3Moe || family == Family::Mixtral)
    readMixtureOfExperts(config, reader, model);
}

/// Reads a GPT-2 config.
void readGPT2(ConfigReader &reader, ModelConfig &model) {
  model.vocab = reader.getInt("vocab_size");
  model.hidden = reader.getInt("n_embd");
  model.layers = reader.getInt("n_layer", 1, kMaxLayers);
  model.heads = reader.getInt("n_head");
  model.maxPositions = reader.getInt("n_positions");
  model.intermediate =
      reader.getOptionalInt("n_inner").value_or(4 * model.hidden);
  model.normEps =
      reader.getNumber("layer_norm_epsilon", 1e-5, /*allowZero=*/true);
  model.initStd = reader.getNumber("initializer_range", 0.02);
  model.tieEmbeddings = reader.getBool("tie_word_embeddings", true);
  model.scaleAttnWeights = reader.getBool("scale_attn_weights", true);
  model.scaleByInverseLayerIdx =
      reader.getBool("scale_attn_by_inverse_layer_idx", false);
  std::string act = reader.getString("activation_function", "gelu_new");
  if (reader.failed())
    return;

  if (act == "gelu_new" || act == "gelu_pytorch_tanh") {
    model.geluApproximate = "tanh";
  } else if (act == "gelu") {
    model.geluApproximate = "none";
  } else {
    reader.fail("field 'activation_function' is '" + act +
                "', but only 'gelu_new', 'gelu_pytorch_tanh' and 'gelu' are "
                "supported");
    return;
  }
  if (model.hidden % model.heads != 0) {
    reader.fail("field 'n_head' (" + std::to_string(model.heads) +
                ") does not divide field 'n_embd' (" +
                std::to_string(model.hidden) + ")");
    return;
  }
  model.kvHeads = model.heads;
  model.headDim = model.hidden / model.heads;
}

//===----------------------------------------------------------------------===//
// GraphBuilder
//===----------------------------------------------------------------------===//

ojson normalInit(double stddev) {
  return {{"kind", "normal"}, {"std", stddev}};
}
ojson onesInit() { return {{"kind", "ones"}}; }
ojson zerosInit() { return {{"kind", "zeros"}}; }

/// Accumulates the sections of a graph.json document.
class GraphBuilder {
public:
  explicit GraphBuilder(std::string dtype) : dtype(std::move(dtype)) {}

  /// Adds a data input.
  void addInput(const std::string &name, const Shape &shape,
                const char *inputDtype) {
    inputs.push_back({{"name", name}, {"shape", shape}, {"dtype", inputDtype}});
  }

  /// Adds a parameter in the graph's parameter dtype.
  void addParameter(const std::string &name, const Shape &shape, ojson init) {
    parameters.push_back({{"name", name},
                          {"shape", shape},
                          {"dtype", dtype},
                          {"init", std::move(init)}});
  }

  /// Adds `<module>.weight` [out, in] and, with `bias`, `<module>.bias` [out]
  /// for an nn.Linear.
  void addLinearParameters(const std::string &module, int64_t in, int64_t out,
                           bool bias, double stddev) {
    addParameter(module + ".weight", {out, in}, normalInit(stddev));
    if (bias)
      addParameter(module + ".bias", {out}, zerosInit());
  }

  /// Adds a node and returns its name, so calls can be chained into values.
  std::string addNode(const std::string &name, const char *op,
                      std::vector<std::string> operands, ojson attrs,
                      const std::string &module) {
    nodes.push_back({{"name", name},
                     {"op", op},
                     {"inputs", std::move(operands)},
                     {"attrs", std::move(attrs)},
                     {"module", module}});
    return name;
  }

  /// An nn.Linear node named after its module, with the module's parameters.
  std::string addLinear(const std::string &module, const std::string &x,
                        bool bias) {
    std::vector<std::string> operands = {x, module + ".weight"};
    if (bias)
      operands.push_back(module + ".bias");
    return addNode(module, "linear", std::move(operands), ojson::object(),
                   module);
  }

  /// A reshape node; `module` is the module whose forward reshapes.
  std::string addReshape(const std::string &name, const std::string &x,
                         const Shape &shape, const std::string &module) {
    return addNode(name, "reshape", {x}, {{"shape", shape}}, module);
  }

  /// Assembles the document; the builder is empty afterwards.
  ojson finish(const std::string &model, ojson outputs) {
    ojson graph = ojson::object();
    graph["format"] = "fsdp-graph";
    graph["version"] = 1;
    graph["model"] = model;
    graph["inputs"] = std::move(inputs);
    graph["parameters"] = std::move(parameters);
    graph["nodes"] = std::move(nodes);
    graph["outputs"] = std::move(outputs);
    return graph;
  }

private:
  std::string dtype;
  ojson inputs = ojson::array();
  ojson parameters = ojson::array();
  ojson nodes = ojson::array();
};

/// Adds the lm_head projection of the final hidden state `x` (onto the
/// embedding table when tied, else onto a new `lm_head.weight`) and the loss,
/// and returns the graph.
ojson finishCausalLM(GraphBuilder &builder, const ModelConfig &model,
                     const std::string &x, const std::string &embedding,
                     double initStd, ojson extraOutputs = ojson::array()) {
  std::string head = embedding;
  if (!model.tieEmbeddings) {
    head = "lm_head.weight";
    builder.addParameter(head, {model.vocab, model.hidden},
                         normalInit(initStd));
  }
  std::string logits = builder.addNode("lm_head", "linear", {x, head},
                                       ojson::object(), "lm_head");
  std::string loss =
      builder.addNode("loss", "cross_entropy", {logits, "labels"},
                      {{"ignore_index", -100}, {"reduction", "mean"}}, "loss");
  ojson outputs = {{{"name", "loss"}, {"value", loss}},
                   {{"name", "logits"}, {"value", logits}}};
  for (ojson &output : extraOutputs)
    outputs.push_back(std::move(output));
  return builder.finish(model.architecture, std::move(outputs));
}

/// The parameters of sparse layer `mlp` in the order its module registers
/// them: Qwen3MoeSparseMoeBlock the experts, then the router; Mixtral's the
/// router first.
void addExpertParameters(GraphBuilder &builder, const ModelConfig &model,
                         const std::string &mlp) {
  const int64_t e = model.experts, h = model.hidden, i = model.moeIntermediate;
  auto experts = [&] {
    builder.addParameter(mlp + ".experts.gate_up_proj", {e, 2 * i, h},
                         normalInit(model.initStd));
    builder.addParameter(mlp + ".experts.down_proj", {e, h, i},
                         normalInit(model.initStd));
  };
  if (model.family == Family::Qwen3Moe)
    experts();
  builder.addParameter(mlp + ".gate.weight", {e, h}, normalInit(model.initStd));
  if (model.family != Family::Qwen3Moe)
    experts();
}

/// A sparse MLP block on `normed` [B, S, H]: the router picks each token's
/// top-k experts, its copies go through their experts' SwiGLU in expert
/// order, and the weighted sum comes back per token. Appends the router
/// logits to `routerLogits`.
std::string addExpertBlock(GraphBuilder &builder, const ModelConfig &model,
                           const std::string &mlp, const std::string &normed,
                           std::vector<std::string> &routerLogits) {
  const std::string experts = mlp + ".experts";
  const ojson numExperts = {{"num_experts", model.experts}};
  std::string logits = builder.addLinear(mlp + ".gate", normed, false);
  routerLogits.push_back(logits);
  std::string router = builder.addNode(
      mlp + ".router", "moe_router", {logits},
      {{"top_k", model.topK}, {"normalize", model.normTopK}}, mlp + ".gate");
  std::string permute =
      builder.addNode(experts + ".permute", "moe_permute",
                      {normed, router + ":1"}, numExperts, experts);
  std::string h =
      builder.addNode(experts + ".gate_up", "grouped_linear",
                      {permute, permute + ":1", experts + ".gate_up_proj"},
                      ojson::object(), experts);
  std::string split = builder.addNode(
      experts + ".chunk", "split", {h},
      {{"dim", -1}, {"sizes", {model.moeIntermediate, model.moeIntermediate}}},
      experts);
  std::string gate = builder.addNode(experts + ".act_fn", "silu", {split},
                                     ojson::object(), experts);
  std::string m = builder.addNode(experts + ".mul", "mul", {gate, split + ":1"},
                                  ojson::object(), experts);
  m = builder.addNode(experts + ".down", "grouped_linear",
                      {m, permute + ":1", experts + ".down_proj"},
                      ojson::object(), experts);
  return builder.addNode(experts + ".unpermute", "moe_unpermute",
                         {m, router + ":1", router + ":0"}, numExperts,
                         experts);
}

/// transformers' load-balancing loss over the sparse layers' router logits
/// (`output_router_logits`): each layer's routing statistics, summed, then
/// combined. Returns the graph output, or nothing when it is off.
ojson addAuxiliaryLoss(GraphBuilder &builder, const ModelConfig &model,
                       const std::vector<std::string> &routerLogits) {
  if (!model.routerLogits || routerLogits.empty())
    return ojson::array();
  std::string stats;
  for (const std::string &logits : routerLogits) {
    std::string layer = logits.substr(0, logits.rfind(".gate"));
    std::string s = builder.addNode(layer + ".router_stats", "moe_aux_stats",
                                    {logits}, {{"top_k", model.topK}}, layer);
    stats = stats.empty() ? s
                          : builder.addNode(layer + ".router_stats_sum", "add",
                                            {stats, s}, ojson::object(), layer);
  }
  std::string aux = builder.addNode("aux_loss", "moe_aux_combine", {stats},
                                    {{"coef", model.auxCoef}}, "aux_loss");
  return {{{"name", "aux_loss"}, {"value", aux}}};
}

/// LlamaForCausalLM and the families that share its layout.
/// An attention node's inputs: with packed rows, the queries' positions in
/// their documents (the position_ids input) follow q, k and v.
std::vector<std::string> attentionInputs(const std::string &q,
                                         const std::string &k,
                                         const std::string &v,
                                         const GraphGenOptions &options) {
  std::vector<std::string> inputs = {q, k, v};
  if (options.packed)
    inputs.push_back("position_ids");
  return inputs;
}

/// A dense SwiGLU MLP's parameters, `<mlp>.gate_proj`, `up_proj` and
/// `down_proj`, in registration order.
void addGatedMlpParameters(GraphBuilder &builder, const ModelConfig &model,
                           const std::string &mlp) {
  const int64_t h = model.hidden, w = model.intermediate;
  for (auto [proj, in, out] :
       {std::tuple("gate_proj", h, w), std::tuple("up_proj", h, w),
        std::tuple("down_proj", w, h)})
    builder.addLinearParameters(mlp + "." + proj, in, out, model.mlpBias,
                                model.initStd);
}

/// down_proj(silu(gate_proj(x)) · up_proj(x)).
std::string addGatedMlp(GraphBuilder &builder, const ModelConfig &model,
                        const std::string &mlp, const std::string &x) {
  std::string gate = builder.addLinear(mlp + ".gate_proj", x, model.mlpBias);
  std::string up = builder.addLinear(mlp + ".up_proj", x, model.mlpBias);
  gate = builder.addNode(mlp + ".act_fn", "silu", {gate}, ojson::object(),
                         mlp + ".act_fn");
  std::string m =
      builder.addNode(mlp + ".mul", "mul", {gate, up}, ojson::object(), mlp);
  return builder.addLinear(mlp + ".down_proj", m, model.mlpBias);
}

ojson buildLlamaLike(const ModelConfig &model, const GraphGenOptions &options) {
  const int64_t b = options.batch, s = options.seq, h = model.hidden;
  const int64_t n = model.heads, kv = model.kvHeads, d = model.headDim;
  const double initStd = model.initStd;
  GraphBuilder builder(options.dtype);
  for (const char *input : {"input_ids", "position_ids", "labels"})
    builder.addInput(input, {b, s}, "i64");

  builder.addParameter("model.embed_tokens.weight", {model.vocab, h},
                       normalInit(initStd));
  std::string x = builder.addNode("model.embed_tokens", "embedding",
                                  {"model.embed_tokens.weight", "input_ids"},
                                  ojson::object(), "model.embed_tokens");

  std::vector<std::string> routerLogits;
  for (int64_t l = 0; l < model.layers; ++l) {
    const std::string layer = "model.layers." + std::to_string(l);
    const std::string attn = layer + ".self_attn";
    const std::string mlp = layer + ".mlp";

    // Parameters in the order the layer's __init__ registers them.
    builder.addLinearParameters(attn + ".q_proj", h, n * d, model.qkvBias,
                                initStd);
    builder.addLinearParameters(attn + ".k_proj", h, kv * d, model.qkvBias,
                                initStd);
    builder.addLinearParameters(attn + ".v_proj", h, kv * d, model.qkvBias,
                                initStd);
    builder.addLinearParameters(attn + ".o_proj", n * d, h, model.outBias,
                                initStd);
    if (model.qkNorm) {
      builder.addParameter(attn + ".q_norm.weight", {d}, onesInit());
      builder.addParameter(attn + ".k_norm.weight", {d}, onesInit());
    }
    const bool sparse = model.isSparse(l);
    if (sparse)
      addExpertParameters(builder, model, mlp);
    else
      addGatedMlpParameters(builder, model, mlp);
    builder.addParameter(layer + ".input_layernorm.weight", {h}, onesInit());
    builder.addParameter(layer + ".post_attention_layernorm.weight", {h},
                         onesInit());

    // Self-attention block.
    ojson eps = {{"eps", model.normEps}};
    std::string normed = builder.addNode(layer + ".input_layernorm", "rms_norm",
                                         {x, layer + ".input_layernorm.weight"},
                                         eps, layer + ".input_layernorm");
    auto project = [&](const char *proj, const char *norm, int64_t numHeads) {
      std::string module = attn + "." + proj;
      std::string value = builder.addLinear(module, normed, model.qkvBias);
      value = builder.addReshape(module + ".reshape", value,
                                 {b, s, numHeads, d}, attn);
      if (norm && model.qkNorm) {
        std::string normModule = attn + "." + norm;
        value =
            builder.addNode(normModule, "rms_norm",
                            {value, normModule + ".weight"}, eps, normModule);
      }
      return value;
    };
    std::string q = project("q_proj", "q_norm", n);
    std::string k = project("k_proj", "k_norm", kv);
    std::string v = project("v_proj", nullptr, kv);
    ojson theta = {{"theta", model.ropeTheta}};
    if (!model.ropeInvFreq.empty()) {
      theta["inv_freq"] = model.ropeInvFreq;
      theta["attention_scaling"] = model.ropeAttentionScaling;
    }
    q = builder.addNode(attn + ".q_rotary", "rotary", {q, "position_ids"},
                        theta, attn);
    k = builder.addNode(attn + ".k_rotary", "rotary", {k, "position_ids"},
                        theta, attn);
    ojson attnAttrs = {{"causal", true}};
    if (options.packed)
      attnAttrs["packed"] = true;
    if (model.windows[l])
      attnAttrs["sliding_window"] = *model.windows[l];
    std::string a = builder.addNode(attn + ".attention", "attention",
                                    attentionInputs(q, k, v, options),
                                    std::move(attnAttrs), attn);
    a = builder.addReshape(attn + ".attention.reshape", a, {b, s, n * d}, attn);
    a = builder.addLinear(attn + ".o_proj", a, model.outBias);
    x = builder.addNode(layer + ".attn_residual", "add", {x, a},
                        ojson::object(), layer);

    // MLP block.
    normed = builder.addNode(layer + ".post_attention_layernorm", "rms_norm",
                             {x, layer + ".post_attention_layernorm.weight"},
                             eps, layer + ".post_attention_layernorm");
    std::string m =
        sparse ? addExpertBlock(builder, model, mlp, normed, routerLogits)
               : addGatedMlp(builder, model, mlp, normed);
    x = builder.addNode(layer + ".mlp_residual", "add", {x, m}, ojson::object(),
                        layer);
  }

  builder.addParameter("model.norm.weight", {h}, onesInit());
  x = builder.addNode("model.norm", "rms_norm", {x, "model.norm.weight"},
                      {{"eps", model.normEps}}, "model.norm");
  ojson aux = addAuxiliaryLoss(builder, model, routerLogits);
  return finishCausalLM(builder, model, x, "model.embed_tokens.weight", initStd,
                        std::move(aux));
}

/// GPT2LMHeadModel. Its projections are transformers Conv1D modules, whose
/// weight is [in, out], hence matmul + add instead of linear.
ojson buildGPT2(const ModelConfig &model, const GraphGenOptions &options) {
  const int64_t b = options.batch, s = options.seq, h = model.hidden;
  const int64_t n = model.heads, d = model.headDim;
  const double initStd = model.initStd;
  // GPT-2 scales the residual output projections by 1/sqrt(2 * n_layer).
  const double projStd = initStd / std::sqrt(2.0 * model.layers);
  GraphBuilder builder(options.dtype);
  for (const char *input : {"input_ids", "position_ids", "labels"})
    builder.addInput(input, {b, s}, "i64");

  auto addConv1D = [&](const std::string &module, const std::string &x) {
    std::string y = builder.addNode(
        module + ".matmul", "matmul", {x, module + ".weight"},
        {{"transpose_a", false}, {"transpose_b", false}}, module);
    return builder.addNode(module, "add", {y, module + ".bias"},
                           ojson::object(), module);
  };
  auto addLayerNorm = [&](const std::string &module, const std::string &x) {
    builder.addParameter(module + ".weight", {h}, onesInit());
    builder.addParameter(module + ".bias", {h}, zerosInit());
    return builder.addNode(module, "layer_norm",
                           {x, module + ".weight", module + ".bias"},
                           {{"eps", model.normEps}}, module);
  };
  auto addConv1DParameters = [&](const std::string &module, int64_t in,
                                 int64_t out, double weightStd) {
    builder.addParameter(module + ".weight", {in, out}, normalInit(weightStd));
    builder.addParameter(module + ".bias", {out}, zerosInit());
  };

  builder.addParameter("transformer.wte.weight", {model.vocab, h},
                       normalInit(initStd));
  builder.addParameter("transformer.wpe.weight", {model.maxPositions, h},
                       normalInit(initStd));
  std::string tokens = builder.addNode("transformer.wte", "embedding",
                                       {"transformer.wte.weight", "input_ids"},
                                       ojson::object(), "transformer.wte");
  std::string positions =
      builder.addNode("transformer.wpe", "embedding",
                      {"transformer.wpe.weight", "position_ids"},
                      ojson::object(), "transformer.wpe");
  std::string x =
      builder.addNode("transformer.embeddings", "add", {tokens, positions},
                      ojson::object(), "transformer");

  for (int64_t l = 0; l < model.layers; ++l) {
    const std::string layer = "transformer.h." + std::to_string(l);
    const std::string attn = layer + ".attn";
    const std::string mlp = layer + ".mlp";

    std::string normed = addLayerNorm(layer + ".ln_1", x);
    addConv1DParameters(attn + ".c_attn", h, 3 * h, initStd);
    addConv1DParameters(attn + ".c_proj", h, h, projStd);
    std::string qkv = addConv1D(attn + ".c_attn", normed);
    std::string split =
        builder.addNode(attn + ".split", "split", {qkv},
                        {{"dim", 2}, {"sizes", {h, h, h}}}, attn);
    std::string q =
        builder.addReshape(attn + ".q.reshape", split, {b, s, n, d}, attn);
    std::string k = builder.addReshape(attn + ".k.reshape", split + ":1",
                                       {b, s, n, d}, attn);
    std::string v = builder.addReshape(attn + ".v.reshape", split + ":2",
                                       {b, s, n, d}, attn);
    ojson attnAttrs = {{"causal", true}};
    if (options.packed)
      attnAttrs["packed"] = true;
    // Only non-default scales are written; the op defaults to 1/sqrt(D).
    if (!model.scaleAttnWeights || model.scaleByInverseLayerIdx) {
      double scale = model.scaleAttnWeights
                         ? 1.0 / std::sqrt(static_cast<double>(d))
                         : 1.0;
      if (model.scaleByInverseLayerIdx)
        scale /= static_cast<double>(l + 1);
      attnAttrs["scale"] = scale;
    }
    std::string a = builder.addNode(attn + ".attention", "attention",
                                    attentionInputs(q, k, v, options),
                                    std::move(attnAttrs), attn);
    a = builder.addReshape(attn + ".attention.reshape", a, {b, s, h}, attn);
    a = addConv1D(attn + ".c_proj", a);
    x = builder.addNode(layer + ".attn_residual", "add", {x, a},
                        ojson::object(), layer);

    normed = addLayerNorm(layer + ".ln_2", x);
    addConv1DParameters(mlp + ".c_fc", h, model.intermediate, initStd);
    addConv1DParameters(mlp + ".c_proj", model.intermediate, h, projStd);
    std::string m = addConv1D(mlp + ".c_fc", normed);
    m = builder.addNode(mlp + ".act", "gelu", {m},
                        {{"approximate", model.geluApproximate}}, mlp + ".act");
    m = addConv1D(mlp + ".c_proj", m);
    x = builder.addNode(layer + ".mlp_residual", "add", {x, m}, ojson::object(),
                        layer);
  }

  x = addLayerNorm("transformer.ln_f", x);
  return finishCausalLM(builder, model, x, "transformer.wte.weight", initStd);
}

/// Checks the options that do not depend on the config.
std::string checkOptions(const GraphGenOptions &options) {
  if (options.batch < 1 || options.batch > kMaxDim)
    return "batch size must be in [1, " + std::to_string(kMaxDim) + "], got " +
           std::to_string(options.batch);
  if (options.seq < 1 || options.seq > kMaxDim)
    return "sequence length must be in [1, " + std::to_string(kMaxDim) +
           "], got " + std::to_string(options.seq);
  if (options.dtype != "f32" && options.dtype != "bf16" &&
      options.dtype != "f16")
    return "unsupported dtype '" + options.dtype +
           "' (supported: f32, bf16, f16)";
  return "";
}

/// countParameters() for either JSON object flavour.
template <typename Json> int64_t countParametersImpl(const Json &graph) {
  if (!graph.is_object())
    return -1;
  auto params = graph.find("parameters");
  if (params == graph.end() || !params->is_array())
    return -1;
  int64_t total = 0;
  for (const auto &param : *params) {
    if (!param.is_object())
      return -1;
    auto shape = param.find("shape");
    if (shape == param.end() || !shape->is_array())
      return -1;
    int64_t elements = 1;
    for (const auto &dim : *shape) {
      if (!dim.is_number_integer() || dim.template get<int64_t>() < 0)
        return -1;
      elements *= dim.template get<int64_t>();
    }
    total += elements;
  }
  return total;
}

} // namespace

//===----------------------------------------------------------------------===//
// Public API
//===----------------------------------------------------------------------===//

const std::vector<std::string> &getSupportedArchitectures() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> result;
    for (const auto &entry : getArchitectureTable())
      result.push_back(entry.first);
    return result;
  }();
  return names;
}

GraphGenResult generateGraph(const json &config,
                             const GraphGenOptions &options) {
  GraphGenResult result;
  result.error = checkOptions(options);
  if (!result.error.empty())
    return result;
  if (!config.is_object()) {
    result.error = "config must be a JSON object, got " + describe(config);
    return result;
  }

  ModelConfig model;
  if (!readArchitecture(config, model, result.error))
    return result;
  ConfigReader reader(config);
  if (model.family == Family::GPT2)
    readGPT2(reader, model);
  else
    readLlamaLike(config, reader, model);
  if (!reader.failed() && model.family == Family::GPT2 &&
      options.seq > model.maxPositions)
    reader.fail("sequence length " + std::to_string(options.seq) +
                " exceeds field 'n_positions' (" +
                std::to_string(model.maxPositions) + ")");
  if (reader.failed()) {
    result.error = reader.error;
    return result;
  }

  // Dropout is not compiled: a config that asks for it trains differently
  // in PyTorch. GPT2Config defaults its three rates to 0.1.
  std::vector<std::pair<const char *, double>> dropouts;
  if (model.family == Family::GPT2)
    dropouts = {{"embd_pdrop", 0.1}, {"attn_pdrop", 0.1}, {"resid_pdrop", 0.1}};
  else
    dropouts = {{"attention_dropout", 0.0}};
  std::string rates;
  for (auto [key, fallback] : dropouts) {
    auto it = config.find(key);
    double rate =
        it == config.end() || !it->is_number() ? fallback : it->get<double>();
    if (rate != 0.0)
      rates += std::string(rates.empty() ? "" : ", ") + key + " " +
               (std::ostringstream() << rate).str() +
               (it == config.end() ? " (default)" : "");
  }
  if (!rates.empty())
    result.warnings.push_back("dropout (" + rates +
                              ") is not applied: the compiled step runs "
                              "without dropout");

  result.graph = model.family == Family::GPT2 ? buildGPT2(model, options)
                                              : buildLlamaLike(model, options);
  result.architecture = model.architecture;
  result.numLayers = model.layers;
  result.hiddenSize = model.hidden;
  return result;
}

int64_t countParameters(const ojson &graph) {
  return countParametersImpl(graph);
}

int64_t countParameters(const json &graph) {
  return countParametersImpl(graph);
}

std::string printGraph(const ojson &graph) {
  auto compact = [](const ojson &value) {
    return value.dump(-1, ' ', false, ojson::error_handler_t::replace);
  };
  if (!graph.is_object() || graph.empty())
    return compact(graph) + "\n";
  std::string out = "{\n";
  size_t index = 0;
  for (auto it = graph.begin(); it != graph.end(); ++it) {
    out += "  " + compact(it.key()) + ": ";
    const ojson &value = it.value();
    if (value.is_array() && !value.empty()) {
      out += "[\n";
      for (size_t i = 0, e = value.size(); i != e; ++i) {
        out += "    " + compact(value[i]);
        out += i + 1 != e ? ",\n" : "\n";
      }
      out += "  ]";
    } else {
      out += compact(value);
    }
    out += ++index != graph.size() ? ",\n" : "\n";
  }
  out += "}\n";
  return out;
}

} // namespace fsdp
