#include "tools/train/optimizer_shard.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "engine/autograd.h"
#include "engine/error.h"
#include "ops/view.h"

namespace eng::jobs {
namespace {

// "optim.exp_avg.layers.0.w" -> {"exp_avg", "layers.0.w"}: kinds have no dot, parameter names may.
std::pair<std::string, std::string> split_state_name(const std::string& n) {
  const size_t dot = n.find('.', 6);
  ENG_CHECK(n.compare(0, 6, "optim.") == 0 && dot != std::string::npos, "train: optimizer state '", n,
            "' is not optim.<kind>.<parameter>");
  return {n.substr(6, dot - 6), n.substr(dot + 1)};
}

Tensor flat_view(const Tensor& p) { return reshape(p.detach(), {-1}); }

}  // namespace

OptimizerShard::OptimizerShard(Communicator& comm, NamedTensors params) : comm_(comm), params_(std::move(params)) {
  NoGradGuard no_grad;
  offsets_.push_back(0);
  for (const auto& [name, p] : params_) {
    ENG_CHECK(p.dtype() == DType::F32 && p.device() == Device::CPU && p.is_contiguous(), "train: --shard-optimizer "
              "needs contiguous f32 parameters on the cpu; '", name, "' is not");
    offsets_.push_back(offsets_.back() + size_t(p.numel()));
  }
  slices_ = even_slices(offsets_.back(), comm_.size());
  const size_t lo = slices_[size_t(comm_.rank())], hi = slices_[size_t(comm_.rank()) + 1];
  for (size_t i = 0; i < params_.size(); ++i) {
    const size_t a = std::max(lo, offsets_[i]), b = std::min(hi, offsets_[i + 1]);
    if (a >= b) continue;
    pieces_.emplace_back(params_[i].first, narrow(flat_view(params_[i].second), 0, int64_t(a - offsets_[i]),
                                                  int64_t(b - a)));
    piece_param_.push_back(i);
    piece_start_.push_back(int64_t(a - offsets_[i]));
  }
  ENG_CHECK(!pieces_.empty(), "train: --shard-optimizer: rank ", comm_.rank(), " of ", comm_.size(), " holds none of the ",
            offsets_.back(), " parameters (fewer ranks, or no sharding)");
}

void OptimizerShard::set_piece_grads() {
  NoGradGuard no_grad;
  for (size_t j = 0; j < pieces_.size(); ++j) {
    const Tensor g = params_[piece_param_[j]].second.grad();
    Tensor& piece = pieces_[j].second;
    if (!g.defined())
      piece.zero_grad();
    else
      piece.set_grad(narrow(reshape(g.contiguous(), {-1}), 0, piece_start_[j], piece.numel()));
  }
}

void OptimizerShard::set_piece_grads(const float* flat, const std::vector<unsigned char>& has_grad) {
  for (size_t j = 0; j < pieces_.size(); ++j) {
    Tensor& piece = pieces_[j].second;
    const size_t i = piece_param_[j];
    if (!has_grad[i]) {
      piece.zero_grad();
      continue;
    }
    Tensor g = empty(piece.shape(), DType::F32);
    std::memcpy(g.data<float>(), flat + offsets_[i] + size_t(piece_start_[j]), size_t(piece.numel()) * sizeof(float));
    piece.set_grad(g);
  }
}

void OptimizerShard::gather_parameters() {
  for (auto& np : pieces_) np.second.zero_grad();  // views of the whole gradients: let them go with the parameters'
  flat_.resize(offsets_.back());
  for (size_t j = 0; j < pieces_.size(); ++j) {
    const Tensor& piece = pieces_[j].second;
    std::memcpy(flat_.data() + offsets_[piece_param_[j]] + size_t(piece_start_[j]), piece.data<float>(),
                size_t(piece.numel()) * sizeof(float));
  }
  comm_.all_gather(flat_.data(), slices_);
  for (size_t i = 0; i < params_.size(); ++i)
    std::memcpy(params_[i].second.data<float>(), flat_.data() + offsets_[i], (offsets_[i + 1] - offsets_[i]) * 4);
}

std::unique_ptr<Optimizer> OptimizerShard::gather_state(const Optimizer& local, const OptimizerFactory& make) const {
  NoGradGuard no_grad;
  std::map<std::string, size_t> param_index, piece_of;
  for (size_t i = 0; i < params_.size(); ++i) param_index[params_[i].first] = i;
  for (size_t j = 0; j < pieces_.size(); ++j) piece_of[pieces_[j].first] = j;
  // kind -> this rank's state tensor per piece; counters (0-d i64) per parameter, 0 where this rank holds none
  std::map<std::string, std::vector<Tensor>> moments;
  std::map<std::string, std::vector<int64_t>> counters;
  for (const auto& [name, t] : local.state()) {
    const auto [kind, param] = split_state_name(name);
    const size_t j = piece_of.at(param);
    if (t.dtype() == DType::I64) {
      auto& c = counters[kind];
      c.resize(params_.size());
      c[piece_param_[j]] = t.data<int64_t>()[0];
    } else {
      auto& m = moments[kind];
      m.resize(pieces_.size());
      m[j] = t;
    }
  }
  NamedTensors whole_state;
  std::vector<float> flat(offsets_.back());
  for (const auto& [kind, per_piece] : moments) {  // the same kinds, in the same order, on every rank
    for (size_t j = 0; j < pieces_.size(); ++j)
      std::memcpy(flat.data() + offsets_[piece_param_[j]] + size_t(piece_start_[j]), per_piece[j].data<float>(),
                  size_t(per_piece[j].numel()) * sizeof(float));
    comm_.all_gather(flat.data(), slices_);
    for (size_t i = 0; i < params_.size(); ++i) {
      Tensor t = empty(params_[i].second.shape(), DType::F32);
      std::memcpy(t.data<float>(), flat.data() + offsets_[i], (offsets_[i + 1] - offsets_[i]) * sizeof(float));
      whole_state.emplace_back("optim." + kind + "." + params_[i].first, t);
    }
  }
  for (auto& [kind, mine] : counters) {  // a parameter's pieces step together: the largest count is every piece's
    std::vector<int64_t> all(mine.size() * size_t(comm_.size()));
    comm_.all_gather_bytes(mine.data(), mine.size() * sizeof(int64_t), all.data());
    for (size_t i = 0; i < params_.size(); ++i) {
      int64_t c = 0;
      for (size_t r = 0; r < size_t(comm_.size()); ++r) c = std::max(c, all[r * params_.size() + i]);
      Tensor t = zeros({}, DType::I64);
      t.data<int64_t>()[0] = c;
      whole_state.emplace_back("optim." + kind + "." + params_[i].first, t);
    }
  }
  std::unique_ptr<Optimizer> whole = make(params_);
  whole->set_lr(local.lr());
  whole->load_state(whole_state, local.steps());
  return whole;
}

void OptimizerShard::scatter_state(const Optimizer& whole, Optimizer& local) const {
  NoGradGuard no_grad;
  std::map<std::string, Tensor> given;
  for (const auto& [name, t] : whole.state()) given[name] = t;
  std::map<std::string, size_t> piece_of;
  for (size_t j = 0; j < pieces_.size(); ++j) piece_of[pieces_[j].first] = j;
  NamedTensors mine;
  for (const auto& [name, t] : local.state()) {
    const Tensor& full = given.at(name);
    if (t.dtype() == DType::I64) {
      mine.emplace_back(name, full);
    } else {
      const size_t j = piece_of.at(split_state_name(name).second);
      mine.emplace_back(name, narrow(reshape(full, {-1}), 0, piece_start_[j], pieces_[j].second.numel()).contiguous());
    }
  }
  local.load_state(mine, whole.steps());
}

}  // namespace eng::jobs
