#include "models/module.h"

#include <algorithm>

#include "engine/cuda.h"
#include "engine/error.h"

namespace eng {

Tensor Module::register_parameter(const std::string& name, Tensor t) {
  ENG_CHECK(!name.empty() && name.find('.') == std::string::npos, "register_parameter: bad name '", name, "'");
  for (auto& [n, p] : params_) ENG_CHECK(n != name, "register_parameter: '", name, "' registered twice");
  t = t.detach();
  t.set_requires_grad(true);
  params_.emplace_back(name, t);
  return t;
}

Tensor Module::register_buffer(const std::string& name, Tensor t) {
  ENG_CHECK(!name.empty() && name.find('.') == std::string::npos, "register_buffer: bad name '", name, "'");
  for (auto& [n, b] : buffers_) ENG_CHECK(n != name, "register_buffer: '", name, "' registered twice");
  t = t.detach();
  buffers_.emplace_back(name, t);
  return t;
}

void Module::register_module(const std::string& name, Module& child) {
  ENG_CHECK(!name.empty() && name.find('.') == std::string::npos, "register_module: bad name '", name, "'");
  for (auto& [n, c] : children_) ENG_CHECK(n != name, "register_module: '", name, "' registered twice");
  children_.emplace_back(name, &child);
}

void Module::collect(const std::string& prefix, bool buffers,
                     std::vector<std::pair<std::string, Tensor>>& out) const {
  for (const auto& [n, p] : buffers ? buffers_ : params_) out.emplace_back(prefix + n, p);
  for (const auto& [n, c] : children_) c->collect(prefix + n + ".", buffers, out);
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", false, out);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", true, out);
  return out;
}

void Module::set_quantizable(const std::string& name, bool on) {
  bool registered = false;
  for (auto& [n, p] : params_) registered |= n == name;
  ENG_CHECK(registered, "set_quantizable: no parameter '", name, "'");
  quantizable_.erase(std::remove(quantizable_.begin(), quantizable_.end(), name), quantizable_.end());
  if (on) quantizable_.push_back(name);
}

std::vector<std::pair<std::string, Tensor>> Module::named_quantizable() const {
  std::vector<std::pair<std::string, Tensor>> all = named_parameters(), out;
  std::vector<std::string> names;
  collect_quantizable("", names);
  for (auto& [n, p] : all)
    if (std::find(names.begin(), names.end(), n) != names.end()) out.emplace_back(n, p);
  return out;
}

void Module::collect_quantizable(const std::string& prefix, std::vector<std::string>& out) const {
  for (const std::string& n : quantizable_) out.push_back(prefix + n);
  for (const auto& [n, c] : children_) c->collect_quantizable(prefix + n + ".", out);
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [n, p] : named_parameters()) out.push_back(p);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (auto& [name, p] : named_parameters()) n += p.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

void Module::zero_grad() {
  for (auto& [n, p] : named_parameters()) p.zero_grad();
}

void Module::to(DType dtype) {
  for (auto& [n, p] : named_parameters()) {
    if (p.dtype() == dtype) continue;
    Tensor converted = empty(p.shape(), dtype);
    converted.copy_from(p);
    TensorImpl* impl = p.impl();
    impl->storage = converted.storage();
    impl->strides = converted.strides();
    impl->offset = 0;
    impl->dtype = dtype;
    impl->grad.reset();
  }
}

void Module::to(Device device) {
  ENG_CHECK(device == Device::CPU || cuda::device_count() > 0, "Module::to(cuda): ", cuda::unavailable_reason());
  auto move = [device](const Tensor& t) {
    if (t.device() == device) return;
    const Tensor moved = to_device(t, device);
    TensorImpl* impl = t.impl();
    impl->storage = moved.storage();
    impl->strides = moved.strides();
    impl->offset = 0;
    impl->grad.reset();
  };
  for (auto& [n, p] : named_parameters()) move(p);
  for (auto& [n, b] : named_buffers()) move(b);
}

}  // namespace eng
