#include "tools/train/csv_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>
#include <vector>

#include "engine/error.h"
#include "engine/file_io.h"
#include "engine/parse_number.h"

namespace eng::jobs {

namespace {

std::vector<std::string> split_fields(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream in(line);
  for (std::string f; std::getline(in, f, ',');) out.push_back(f);
  if (!line.empty() && line.back() == ',') out.emplace_back();
  return out;
}

}  // namespace

CsvLog::CsvLog(const std::string& path, const std::string& header, int64_t resume_step) : path_(path) {
  const std::string who = "train: --log " + path;
  check_output_path(path, "train: --log");
  std::string kept = header + "\n";
  const bool resume = resume_step > 0 && file_kind(path) == "a regular file";
  if (resume) {
    const std::vector<uint8_t> bytes = read_file_bytes(path, "train: --log");
    const std::string text(bytes.begin(), bytes.end());
    const std::vector<std::string> columns = split_fields(header);
    size_t elapsed_col = 0;
    while (elapsed_col < columns.size() && columns[elapsed_col] != "elapsed_s") ++elapsed_col;
    ENG_CHECK(elapsed_col < columns.size(), "CsvLog: the header '", header, "' has no elapsed_s column");
    size_t at = 0;
    for (int64_t line_no = 1; at < text.size(); ++line_no) {
      const size_t end = text.find('\n', at);
      if (end == std::string::npos) break;  // a row cut short by a failed write: dropped, logged again
      const std::string line = text.substr(at, end - at);
      at = end + 1;
      if (line_no == 1) {
        ENG_CHECK(line == header, who, ": its header '", line.substr(0, 200), "' is not this run's '", header,
                  "' (the log of another task?); give another --log");
        continue;
      }
      const std::vector<std::string> f = split_fields(line);
      ENG_CHECK(f.size() == columns.size(), who, ":", line_no, ": ", f.size(), " fields, the header has ",
                columns.size());
      if (parse_int(f[0], IntRange::at_least(0), who + ":" + std::to_string(line_no) + ": step") > resume_step)
        continue;  // logged after the checkpoint: the resumed run logs it again
      kept += line + "\n";
      if (!f[elapsed_col].empty())
        elapsed_before_ = parse_real(f[elapsed_col], RealRange::at_least(0),
                                     who + ":" + std::to_string(line_no) + ": elapsed_s");
    }
    write_file_atomic(path, std::vector<uint8_t>(kept.begin(), kept.end()), "train: --log");
  }
  fd_ = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | (resume ? O_APPEND : O_CREAT | O_TRUNC), 0644);
  if (fd_ < 0) fail(who, ": cannot open for writing: ", std::strerror(errno));
  if (!resume) write_all(kept);
}

CsvLog::~CsvLog() {
  if (fd_ >= 0) ::close(fd_);
}

void CsvLog::row(const std::string& fields) { write_all(fields + "\n"); }

void CsvLog::write_all(const std::string& text) {
  if (!write_fully(fd_, text.data(), text.size()))
    fail("train: cannot write the log ", path_, ": ", std::strerror(errno));
}

}  // namespace eng::jobs
