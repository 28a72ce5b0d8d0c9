// A small command-line parser for the tools: flags are declared with a default and a help line, numeric flags
// with the range of values they accept, then parsed; --help prints them all. Unknown flags, missing values,
// malformed or out-of-range numbers and unexpected arguments are errors that name the flag. Accepted forms:
// --name value, --name=value, and for booleans --name alone, --name true|false or --name=true|false.
#pragma once
#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/parse_number.h"

namespace eng {

class Cli {
 public:
  Cli(std::string program, std::string summary);
  ~Cli();
  // Numeric flags must say which values they accept: a value outside `range` (NaN and infinities included)
  // is refused when parsed, so a flag cannot be read as something it was never meant to be.
  int64_t& add_int(const std::string& name, int64_t def, IntRange range, const std::string& help);
  double& add_double(const std::string& name, double def, RealRange range, const std::string& help);
  std::string& add_string(const std::string& name, const std::string& def, const std::string& help);
  bool& add_bool(const std::string& name, bool def, const std::string& help);
  // Repeatable flag: every occurrence is kept in order.
  std::vector<std::string>& add_list(const std::string& name, const std::string& help);
  // The arguments that are not flags: `usage` names them in the usage line (e.g. "[NAME=]LOG.csv ..."), `help`
  // explains them. Without this call a program takes none, and any is an error.
  void add_positionals(const std::string& usage, const std::string& help, size_t max = SIZE_MAX);
  // A flag this run does not take though the program knows it (another mode's, e.g. another task's): given, it
  // is refused as "<program>: --<name> <why>" rather than as an unknown flag. It is not listed by help().
  void refuse(const std::string& name, const std::string& why);

  // Parses argv[first..]; positional arguments are returned. Returns false after printing help for --help.
  bool parse(int argc, char** argv, int first = 1);
  const std::vector<std::string>& positional() const { return positional_; }
  bool was_set(const std::string& name) const;
  std::vector<std::string> names() const;  // the declared flags, in the order of declaration
  std::string help() const;
  std::string usage() const;  // the first line of help(): "usage: train [flags] TASK"

 private:
  struct Flag;
  Flag& add(const std::string& name, const std::string& help, const std::string& def_text);
  std::string program_, summary_;
  std::vector<std::unique_ptr<Flag>> flags_;
  std::map<std::string, Flag*> by_name_;
  std::map<std::string, std::string> refused_;  // name -> why
  std::vector<std::string> positional_;
  std::string positional_usage_, positional_help_;
  size_t max_positional_ = 0;
};

}  // namespace eng
