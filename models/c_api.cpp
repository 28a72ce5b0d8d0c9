// The C interface (models/c_api.h): the allocation-free Generator on a checkpoint's tensors where they lie (the
// mapping's or the caller's buffer's pages: models/generator_checkpoint.h), the model described by its metadata but
// not built, so that a C program links no layer, attention class or Tensor op. Each function
// turns what the library throws into a status and this thread's message; in a build without exceptions a failed
// check goes to the error handler instead (engine/error.h) and the arguments are checked here first, so that a
// caller's mistake is still a status.
#include "models/c_api.h"

#include <algorithm>
#include <exception>
#include <memory>
#include <new>
#include <string>

#include "engine/error.h"
#include "engine/safetensors.h"
#include "models/checkpoint.h"
#include "models/generator.h"
#include "models/generator_checkpoint.h"

struct eng_model {
  eng::SafetensorsFile file;  // the weights' views, which the generator reads
  int64_t vocab = 0, max_len = 0;
  std::unique_ptr<eng::Generator> generator;
};

namespace {

using namespace eng;

thread_local std::string t_last_error;

eng_status failed(eng_status status, std::string message) {
  t_last_error = std::move(message);
  return status;
}

// Runs `body` (which returns a status), turning an escaping exception into ENG_ERROR_MODEL or ENG_ERROR_MEMORY.
template <class Body>
eng_status guarded(eng_status on_error, Body&& body) {
  t_last_error.clear();
#if defined(__cpp_exceptions)
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return failed(ENG_ERROR_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    return failed(on_error, e.what());
  } catch (...) {
    return failed(on_error, "an unknown error");
  }
#else
  (void)on_error;
  return body();
#endif
}

// The decoder-only language model a checkpoint written by train describes (docs/checkpoint.md).
TransformerConfig model_config(const std::string& name, const std::map<std::string, std::string>& metadata) {
  const std::map<std::string, std::string> config = read_run_config(metadata).model;
  ENG_CHECK(!config.empty(), name, " has no config.* metadata: not a checkpoint written by train");
  auto encoder = config.find("encoder_layers");
  ENG_CHECK(encoder == config.end() || encoder->second == "0", name,
            " does not hold a decoder-only language model (encoder_layers ", encoder->second, ")");
  TransformerConfig c = TransformerConfig::from_map(config);
  ENG_CHECK(c.outputs == 0, name, " outputs mixture parameters, not token logits");
  return c;
}

eng_status load(SafetensorsFile file, const std::string& name, eng_model** out) {
  auto m = std::make_unique<eng_model>();
  m->file = std::move(file);
  const TransformerConfig config = model_config(name, m->file.metadata);
  const std::string why = generator_unsupported(config);
  if (!why.empty()) return failed(ENG_ERROR_MODEL, name + ": the model has " + why + ", which the C API does not run");
  m->generator = std::make_unique<Generator>(generator_weights(m->file, name, config));
  m->vocab = config.vocab;
  m->max_len = config.max_len;
  *out = m.release();
  return ENG_OK;
}

eng_status check_token(const eng_model* m, int64_t token, const char* who) {
  const int64_t vocab = m->vocab;
  if (token < 0 || token >= vocab)
    return failed(ENG_ERROR_ARGUMENT, std::string(who) + ": token " + std::to_string(token) + " is outside 0.." +
                                          std::to_string(vocab - 1));
  return ENG_OK;
}

}  // namespace

extern "C" {

eng_status eng_load_file(const char* path, eng_model** out) {
  if (!path || !out) return failed(ENG_ERROR_ARGUMENT, "eng_load_file: path and out must not be null");
  *out = nullptr;
  return guarded(ENG_ERROR_MODEL, [&] { return load(map_safetensors(path), path, out); });
}

eng_status eng_load_buffer(const void* data, size_t size, eng_model** out) {
  if (!data || !out) return failed(ENG_ERROR_ARGUMENT, "eng_load_buffer: data and out must not be null");
  *out = nullptr;
  const std::string name = "buffer of " + std::to_string(size) + " bytes";
  return guarded(ENG_ERROR_MODEL, [&] { return load(view_safetensors(data, size, name), name, out); });
}

void eng_free(eng_model* model) { delete model; }

int64_t eng_vocab(const eng_model* model) { return model->vocab; }
int64_t eng_max_len(const eng_model* model) { return model->max_len; }
int64_t eng_length(const eng_model* model) { return model->generator->length(); }
void eng_reset(eng_model* model) { model->generator->reset(); }

eng_status eng_step(eng_model* model, int64_t token, const float** logits) {
  if (!model || !logits) return failed(ENG_ERROR_ARGUMENT, "eng_step: model and logits must not be null");
  t_last_error.clear();
  if (eng_status s = check_token(model, token, "eng_step"); s != ENG_OK) return s;
  if (model->generator->length() >= eng_max_len(model))
    return failed(ENG_ERROR_ARGUMENT, "eng_step: the sequence already holds max_len = " +
                                          std::to_string(eng_max_len(model)) + " positions (eng_reset starts anew)");
  return guarded(ENG_ERROR_MODEL, [&] {
    *logits = model->generator->step(token);
    return ENG_OK;
  });
}

eng_status eng_generate(eng_model* model, const int64_t* prompt, size_t prompt_len, size_t count, int64_t* out) {
  if (!model || !prompt || prompt_len == 0 || (count > 0 && !out))
    return failed(ENG_ERROR_ARGUMENT, "eng_generate: model, prompt and out must not be null, prompt_len >= 1");
  t_last_error.clear();
  for (size_t i = 0; i < prompt_len; ++i)
    if (eng_status s = check_token(model, prompt[i], "eng_generate: prompt"); s != ENG_OK) return s;
  const uint64_t room = uint64_t(eng_max_len(model) - eng_length(model));
  if (uint64_t(prompt_len) > room || (count > 0 && uint64_t(count) - 1 > room - uint64_t(prompt_len)))
    return failed(ENG_ERROR_ARGUMENT, "eng_generate: a prompt of " + std::to_string(prompt_len) + " and " +
                                          std::to_string(count) + " new tokens need more than the " +
                                          std::to_string(room) + " positions left before max_len");
  return guarded(ENG_ERROR_MODEL, [&] {
    Generator& g = *model->generator;
    const int64_t vocab = g.outputs();
    const float* logits = nullptr;
    for (size_t i = 0; i < prompt_len; ++i) logits = g.step(prompt[i]);
    for (size_t i = 0; i < count; ++i) {
      out[i] = int64_t(std::max_element(logits, logits + vocab) - logits);
      if (i + 1 < count) logits = g.step(out[i]);
    }
    return ENG_OK;
  });
}

const char* eng_last_error(void) { return t_last_error.c_str(); }

void eng_set_error_handler(eng_error_handler handler, void* user) { set_error_handler(handler, user); }

}  // extern "C"
