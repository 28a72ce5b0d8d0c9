// Training end to end: checkpoints round trip and resume identically; a tiny copy model learns.
#include <cstdio>
#include <unistd.h>

#include "datasets/copy_task.h"
#include "datasets/seq2seq_tasks.h"
#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/optim.h"
#include "engine/safetensors.h"
#include "models/checkpoint.h"
#include "models/transformer.h"
#include "ops/loss.h"
#include "ops/view.h"
#include "tests/gradcheck.h"

using namespace eng;

namespace {

TransformerConfig copy_config(int64_t d_model = 16) {
  TransformerConfig c;
  c.vocab = 6;
  c.d_model = d_model;
  c.heads = 2;
  c.d_ff = 4 * d_model;
  c.decoder_layers = 2;
  c.max_len = 12;
  c.dropout = 0.1;  // exercises the dropout generator's position in the checkpoint
  return c;
}

double train_step(LanguageModel& m, Optimizer& opt, const CopyTask& task, Rng& data) {
  LMBatch b = task.sample(data, 0, 8);
  data.set_position(data.position() + 1);  // the next step's stream
  Tensor logits = m.forward(b.inputs);
  Tensor loss = cross_entropy(reshape(logits, {-1, logits.size(-1)}), reshape(b.targets, {-1}), kIgnore);
  opt.zero_grad();
  loss.backward();
  clip_grad_norm(opt.params(), 1.0);
  opt.step();
  return loss.item();
}

std::string temp_path(const char* name) { return "/tmp/eng_test_" + std::to_string(getpid()) + "_" + name; }

}  // namespace

TEST_CASE("checkpoint: save, load, resume gives the identical loss sequence") {
  CopyTask task(12, 4);
  std::string path = temp_path("resume.safetensors");
  std::vector<double> straight, resumed;
  {
    LanguageModel m(copy_config());
    RAdam opt(m.named_parameters(), 1e-3);
    Rng data(5);
    for (int i = 0; i < 6; ++i) {
      if (i == 3) {
        save_checkpoint(path, m, &opt,
                        {{"step", "3"}, {"data", std::to_string(data.position())},
                         {"model_rng", std::to_string(m.rng().position())}});
      }
      straight.push_back(train_step(m, opt, task, data));
    }
  }
  {
    LanguageModel m(copy_config());
    RAdam opt(m.named_parameters(), 1e-3);
    auto meta = load_checkpoint(path, m, &opt);
    CHECK(opt.steps() == 3);
    Rng data(5, std::stoull(meta.at("data")));
    m.rng().set_position(std::stoull(meta.at("model_rng")));
    for (int i = 3; i < 6; ++i) resumed.push_back(train_step(m, opt, task, data));
  }
  for (int i = 0; i < 3; ++i) CHECK(resumed[size_t(i)] == straight[size_t(i) + 3]);  // bit-identical
  std::remove(path.c_str());
}

TEST_CASE("checkpoint: the run's config is read from both forms, written in the new one") {
  // The old form, as train wrote a text run before the task's keys had their own prefix: the name and the
  // symbol flags (which that task refused, so they held their defaults) among the model's keys.
  const std::map<std::string, std::string> old_form{
      {"config.d_model", "16"}, {"config.vocab", "256"}, {"config.task", "text"}, {"config.symbols", "10"},
      {"config.fixed_length", "false"}, {"step", "4"}};
  const RunConfig old_read = read_run_config(old_form);
  CHECK(old_read.old_form);
  CHECK(old_read.model == std::map<std::string, std::string>{{"d_model", "16"}, {"vocab", "256"}});
  CHECK(old_read.task ==
        std::map<std::string, std::string>{{"name", "text"}, {"symbols", "10"}, {"fixed_length", "false"}});
  check_checkpoint_config("old.st", old_form, {{"d_model", "16"}, {"vocab", "256"}});
  check_checkpoint_task("old.st", old_form, {{"name", "text"}});  // keys the task does not read are ignored
  CHECK_THROWS_WITH(check_checkpoint_task("old.st", old_form, {{"name", "copy"}}),
                    "checkpoint old.st is for a different model: task.name = text in the checkpoint, copy requested");

  // The new form: written from the same split, read back to it; a key only the checkpoint has is a difference.
  const std::map<std::string, std::string> new_form = run_config_metadata(old_read);
  CHECK(new_form == std::map<std::string, std::string>{{"config.d_model", "16"}, {"config.vocab", "256"},
                                                       {"task.name", "text"}, {"task.symbols", "10"},
                                                       {"task.fixed_length", "false"}});
  const RunConfig new_read = read_run_config(new_form);
  CHECK(!new_read.old_form);
  CHECK(new_read.model == old_read.model);
  CHECK(new_read.task == old_read.task);
  CHECK_THROWS_WITH(check_checkpoint_task("new.st", new_form, {{"name", "text"}, {"symbols", "10"}}),
                    "checkpoint new.st is for a different model: task.fixed_length = false in the checkpoint, not "
                    "set in the requested task");
  CHECK_THROWS_WITH(check_checkpoint_task("new.st", {{"config.d_model", "16"}}, {{"name", "text"}}),
                    "checkpoint new.st: no task key 'task.name' (not a checkpoint of this tool?)");
  // A key of the old task list is a model key in a checkpoint without config.task (not one train wrote).
  CHECK(read_run_config({{"config.symbols", "3"}}).model.count("symbols") == 1);
}

TEST_CASE("checkpoint: a different model or optimizer is refused with a clear error") {
  std::string path = temp_path("other.safetensors");
  LanguageModel small(copy_config(16));
  Adam adam(small.named_parameters(), 1e-3);
  save_checkpoint(path, small, &adam, {{"config.d_model", "16"}});
  LanguageModel big(copy_config(32));
  CHECK_THROWS_WITH(load_checkpoint(path, big, nullptr),
                    ("checkpoint " + path + ": parameter 'embed.tokens.weight' has shape [6, 16], the model has "
                                            "[6, 32]").c_str());
  LanguageModel same(copy_config(16));
  SGD sgd(same.named_parameters(), 0.1, 0.9);
  CHECK_THROWS_WITH(load_checkpoint(path, same, &sgd),
                    ("checkpoint " + path + ": optimizer state is for 'Adam', not 'SGD'").c_str());
  CHECK_THROWS_WITH(check_checkpoint_config(path, {{"config.d_model", "16"}}, {{"d_model", "32"}}),
                    ("checkpoint " + path + " is for a different model: d_model = 16 in the checkpoint, 32 requested")
                        .c_str());
  // a key only the checkpoint has (written only when set, like kv_heads) is a different model too
  CHECK_THROWS_WITH(check_checkpoint_config(path, {{"config.d_model", "16"}, {"config.kv_heads", "2"}},
                                            {{"d_model", "16"}}),
                    ("checkpoint " + path + " is for a different model: kv_heads = 2 in the checkpoint, not set in the "
                                            "requested model").c_str());
  std::remove(path.c_str());
}

TEST_CASE("checkpoint: a flipped data byte or a truncated file is refused; the model is left untouched") {
  const std::string path = temp_path("corrupt.safetensors");
  LanguageModel saved(copy_config(16));
  save_checkpoint(path, saved, nullptr, {{"step", "1"}});
  CHECK_THROWS_WITH(save_checkpoint(path, saved, nullptr, {{"checksum.crc32", "0"}}),
                    ("checkpoint " + path + ": metadata key 'checksum.crc32' is reserved").c_str());
  std::string bytes;
  {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    REQUIRE(f);
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) bytes.append(buf, n);
    std::fclose(f);
  }
  auto write = [&](const std::string& b) {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    REQUIRE(f);
    std::fwrite(b.data(), 1, b.size(), f);
    std::fclose(f);
  };
  LanguageModel other(copy_config(16));
  const Tensor before = other.named_parameters().front().second.clone();
  std::string flipped = bytes;
  flipped[flipped.size() - 3] ^= 0x10;  // inside the last tensor's data
  write(flipped);
  try {
    load_checkpoint(path, other, nullptr);
    FAIL("a corrupt checkpoint loaded");
  } catch (const Error& e) {
    const std::string msg = e.what();
    CHECK(msg.find("checkpoint " + path + ": the tensor data is corrupt (CRC-32 ") == 0);
  }
  CHECK(eng::test::max_abs_diff(other.named_parameters().front().second, before) == 0);
  write(bytes.substr(0, bytes.size() - 100));  // half-written
  CHECK_THROWS(load_checkpoint(path, other, nullptr));
  write(bytes);
  CHECK_NOTHROW(load_checkpoint(path, other, nullptr));
  std::remove(path.c_str());
}

TEST_CASE("checkpoint: check_checksum tells an intact file, a corrupt one and one without a checksum apart") {
  const std::string path = temp_path("checksum.safetensors");
  LanguageModel saved(copy_config(16));
  save_checkpoint(path, saved, nullptr, {});
  SafetensorsFile f = load_safetensors(path);
  ChecksumCheck sum = check_checksum(f);
  CHECK(sum.intact());
  CHECK(sum.recorded == f.metadata.at("checksum.crc32"));
  CHECK(sum.actual.size() == 8);
  f.tensors.back().second.data<float>()[0] += 1;  // what a flipped bit in the file loads as
  sum = check_checksum(f);
  CHECK_FALSE(sum.intact());
  CHECK(sum.recorded == f.metadata.at("checksum.crc32"));
  CHECK(sum.actual != sum.recorded);
  save_safetensors(path, f.tensors, {{"step", "1"}});  // not written by save_checkpoint
  sum = check_checksum(load_safetensors(path));
  CHECK(sum.recorded.empty());
  CHECK_FALSE(sum.intact());
  std::remove(path.c_str());
}

TEST_CASE("a tiny copy-task model learns: held-out copy loss below 0.2 within 800 steps") {
  // 2 layers, d_model 32, copies of up to 4 symbols over 4 symbols. Untrained loss is ~log(6) = 1.8.
  TransformerConfig c = copy_config(32);
  c.dropout = 0;
  c.max_len = 9;
  LanguageModel m(c);
  Adam opt(m.named_parameters(), 3e-3);
  CopyTask task(9, 4);
  Rng data(1);
  auto held_out = [&] {
    NoGradGuard no_grad;
    Rng eval_data(99);
    LMBatch b = task.sample(eval_data, 0, 256);
    Tensor logits = m.forward(b.inputs);
    return cross_entropy(reshape(logits, {-1, logits.size(-1)}), reshape(b.targets, {-1}), kIgnore).item();
  };
  const double first = held_out();
  double last = first;
  int64_t steps = 0;
  while (steps < 800 && last >= 0.2) {
    for (int i = 0; i < 50; ++i, ++steps) train_step(m, opt, task, data);
    last = held_out();
  }
  INFO("copy task: held-out loss ", first, " -> ", last, " after ", steps, " steps");
  CHECK(first > 1.0);
  CHECK(last < 0.2);
}
