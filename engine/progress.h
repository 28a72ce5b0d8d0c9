// A progress line for long loops: "step 120/3000 | <fields> | 00:01:23 elapsed | ETA 00:10:00".
// On a terminal it is redrawn in place; otherwise (a pipe, a log file) each update is its own line.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace eng {

class Progress {
 public:
  Progress(int64_t first_step, int64_t total_steps);
  // Prints the line for `step` (steps done so far) with caller-formatted fields.
  void update(int64_t step, const std::string& fields);
  // Ends the in-place line with a newline (no-op when not a terminal).
  void finish();
  double elapsed_seconds() const;

  static std::string hms(double seconds);

 private:
  int64_t first_, total_;
  bool tty_;
  bool open_line_ = false;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace eng
