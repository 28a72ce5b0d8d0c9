// A small command-line parser for the tools: flags are declared with a default and a help line, then
// parsed; --help prints them all. Unknown flags, missing values and malformed numbers are errors that
// name the flag. Accepted forms: --name value, --name=value, and --name alone for booleans.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace eng {

class Cli {
 public:
  Cli(std::string program, std::string summary);
  ~Cli();
  int64_t& add_int(const std::string& name, int64_t def, const std::string& help);
  double& add_double(const std::string& name, double def, const std::string& help);
  std::string& add_string(const std::string& name, const std::string& def, const std::string& help);
  bool& add_bool(const std::string& name, bool def, const std::string& help);
  // Repeatable flag: every occurrence is kept in order.
  std::vector<std::string>& add_list(const std::string& name, const std::string& help);

  // Parses argv[first..]; positional arguments are returned. Returns false after printing help for --help.
  bool parse(int argc, char** argv, int first = 1);
  const std::vector<std::string>& positional() const { return positional_; }
  bool was_set(const std::string& name) const;
  std::string help() const;

 private:
  struct Flag;
  Flag& add(const std::string& name, const std::string& help, const std::string& def_text);
  std::string program_, summary_;
  std::vector<std::unique_ptr<Flag>> flags_;
  std::map<std::string, Flag*> by_name_;
  std::vector<std::string> positional_;
};

}  // namespace eng
