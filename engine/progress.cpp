#include "engine/progress.h"

#include <unistd.h>

#include <cstdio>

namespace eng {

Progress::Progress(int64_t first_step, int64_t total_steps)
    : first_(first_step), total_(total_steps), tty_(isatty(fileno(stdout)) != 0),
      start_(std::chrono::steady_clock::now()) {}

double Progress::elapsed_seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

std::string Progress::hms(double seconds) {
  if (!(seconds >= 0) || seconds > 1e7) return "--:--:--";
  long s = long(seconds + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%02ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  return buf;
}

void Progress::update(int64_t step, const std::string& fields) {
  double el = elapsed_seconds();
  double done = double(step - first_);
  double eta = done > 0 ? el / done * double(total_ - step) : -1;
  std::string line = "step " + std::to_string(step) + "/" + std::to_string(total_) + " | " + fields + " | " +
                     hms(el) + " elapsed | ETA " + hms(eta);
  if (tty_) {
    std::printf("\r\033[K%s", line.c_str());
    open_line_ = true;
  } else {
    std::printf("%s\n", line.c_str());
  }
  std::fflush(stdout);
}

void Progress::finish() {
  if (open_line_) std::printf("\n");
  open_line_ = false;
  std::fflush(stdout);
}

}  // namespace eng
