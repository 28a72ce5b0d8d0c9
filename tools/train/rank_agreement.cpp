#include "tools/train/rank_agreement.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>

#include "engine/checksum.h"
#include "engine/error.h"

namespace eng::jobs {
namespace {

namespace fs = std::filesystem;

// Size and CRC-32 of the first and last 16 MiB: what tells two copies of a data file apart, at a bounded cost.
std::string file_identity(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    std::vector<std::string> entries;
    for (const auto& e : fs::directory_iterator(path, ec))
      entries.push_back(e.path().filename().string() + " " +
                        (e.is_regular_file() ? std::to_string(e.file_size()) : std::string("-")));
    std::sort(entries.begin(), entries.end());
    std::string s = "directory";
    for (const std::string& e : entries) s += "; " + e;
    return s;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return "unreadable";
  in.seekg(0, std::ios::end);
  const uint64_t size = uint64_t(in.tellg());
  constexpr uint64_t kPart = 16 << 20;
  std::vector<char> buf;
  uint32_t crc = 0;
  for (uint64_t start : {uint64_t(0), size > kPart ? std::max(kPart, size - kPart) : size}) {
    buf.resize(size_t(std::min(kPart, size - start)));
    in.seekg(std::streamoff(start));
    in.read(buf.data(), std::streamsize(buf.size()));
    crc = crc32(reinterpret_cast<const uint8_t*>(buf.data()), buf.size(), crc);
  }
  return std::to_string(size) + " bytes, crc32 " + std::to_string(crc);
}

// The first argument where `a` and `b` differ, as "'x' where rank 0 has 'y'".
std::string first_difference(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    const std::string x = i < a.size() ? a[i] : "(nothing)", y = i < b.size() ? b[i] : "(nothing)";
    if (x != y) return "argument " + std::to_string(i) + " is '" + x + "' where rank 0 has '" + y + "'";
  }
  return "";
}

// Splits s at '\n'.
std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t nl; (nl = s.find('\n', start)) != std::string::npos; start = nl + 1) out.push_back(s.substr(start, nl - start));
  out.push_back(s.substr(start));
  return out;
}

}  // namespace

std::vector<std::string> all_gather_string(Communicator& comm, const std::string& s) {
  const size_t ranks = size_t(comm.size());
  std::vector<uint64_t> sizes(ranks);
  const uint64_t mine = s.size();
  comm.all_gather_bytes(&mine, sizeof mine, sizes.data());
  const size_t longest = size_t(*std::max_element(sizes.begin(), sizes.end()));
  std::string padded = s;
  padded.resize(longest);
  std::string all(longest * ranks, '\0');
  comm.all_gather_bytes(padded.data(), longest, all.data());
  std::vector<std::string> out;
  for (size_t r = 0; r < ranks; ++r) out.push_back(all.substr(r * longest, size_t(sizes[r])));
  return out;
}

void check_ranks_agree(Communicator& comm, int argc, char** argv, const std::vector<FlagPath>& inputs) {
  if (comm.size() == 1) return;
  std::string args;
  for (int i = 1; i < argc; ++i) args += std::string(argv[i]) + (i + 1 < argc ? "\n" : "");
  const auto all_args = all_gather_string(comm, args);
  for (int r = 1; r < comm.size(); ++r)
    ENG_CHECK(all_args[size_t(r)] == all_args[0], "train: rank ", r, " was started with other flags than rank 0: ",
              first_difference(lines(all_args[size_t(r)]), lines(all_args[0])));
  const auto binaries = all_gather_string(comm, file_identity("/proc/self/exe"));
  for (int r = 1; r < comm.size(); ++r)
    ENG_CHECK(binaries[size_t(r)] == binaries[0], "train: rank ", r, " runs another binary than rank 0 (",
              binaries[size_t(r)], " against ", binaries[0], ")");
  for (const FlagPath& in : inputs) {
    if (in.path.empty()) continue;
    const auto ids = all_gather_string(comm, file_identity(in.path));
    for (int r = 1; r < comm.size(); ++r)
      ENG_CHECK(ids[size_t(r)] == ids[0], "train: --", in.flag, " ", in.path, " differs between rank ", r, " (",
                ids[size_t(r)], ") and rank 0 (", ids[0], "): every host needs the same file");
  }
}

void check_same_weights(Communicator& comm, const Module& model) {
  if (comm.size() == 1) return;
  uint32_t crc = 0;
  for (const auto& [name, p] : model.named_parameters()) {
    const Tensor c = p.contiguous();
    crc = crc32(static_cast<const uint8_t*>(c.raw_data()), size_t(c.numel()) * dtype_size(c.dtype()), crc);
  }
  std::vector<uint32_t> all(size_t(comm.size()));
  comm.all_gather_bytes(&crc, sizeof crc, all.data());
  for (int r = 1; r < comm.size(); ++r)
    ENG_CHECK(all[size_t(r)] == all[0], "train: rank ", r, "'s initial weights differ from rank 0's (CRC-32 ",
              all[size_t(r)], " against ", all[0], ")");
}

}  // namespace eng::jobs
