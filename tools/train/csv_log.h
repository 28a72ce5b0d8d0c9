// The training log of build/train (--log FILE): a CSV header, then one row per logged step and per evaluation.
// Each row reaches the file with one write(2) as it is logged, so a run killed at any moment (Ctrl-C, SIGKILL)
// leaves every row it logged; a failed write (a full disk) stops the run with an error naming the file. A resumed
// run continues the same file: the header and the rows up to the checkpoint's step are kept, later rows (which
// the resumed run logs again) dropped, and elapsed_s goes on from the last kept row.
#pragma once
#include <cstdint>
#include <string>

namespace eng::jobs {

class CsvLog {
 public:
  // A new log at `path` when `resume_step` is 0, else the continuation of the one there (a new one if none is).
  // `header` names the columns, one of which must be elapsed_s.
  CsvLog(const std::string& path, const std::string& header, int64_t resume_step);
  ~CsvLog();
  CsvLog(const CsvLog&) = delete;
  CsvLog& operator=(const CsvLog&) = delete;
  // The elapsed_s of the last row kept on resume (0 for a new log): the time the run had spent before.
  double elapsed_before() const { return elapsed_before_; }
  void row(const std::string& fields);  // the fields, comma-separated, without the newline

 private:
  void write_all(const std::string& text);
  std::string path_;
  int fd_ = -1;
  double elapsed_before_ = 0;
};

}  // namespace eng::jobs
