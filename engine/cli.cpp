#include "engine/cli.h"

#include <cstdio>

#include "engine/error.h"

namespace eng {

struct Cli::Flag {
  enum Kind { Int, Double, String, Bool, List } kind;
  std::string name, help, def_text, range_text;  // range_text: " in 1..1024", " >= 0", ... for numbers
  int64_t i = 0;
  double d = 0;
  IntRange int_range;
  RealRange real_range;
  std::string s;
  bool b = false;
  std::vector<std::string> list;
  bool set = false;
};

Cli::Cli(std::string program, std::string summary) : program_(std::move(program)), summary_(std::move(summary)) {}
Cli::~Cli() = default;

Cli::Flag& Cli::add(const std::string& name, const std::string& help, const std::string& def_text) {
  ENG_CHECK(!by_name_.count(name), "cli: flag --", name, " declared twice");
  flags_.push_back(std::make_unique<Flag>());
  Flag& f = *flags_.back();
  f.name = name;
  f.help = help;
  f.def_text = def_text;
  by_name_[name] = &f;
  return f;
}

int64_t& Cli::add_int(const std::string& name, int64_t def, IntRange range, const std::string& help) {
  ENG_CHECK(range.contains(def), "cli: the default ", def, " of --", name, " is outside its range", range.text());
  Flag& f = add(name, help, std::to_string(def));
  f.range_text = range.text();
  f.kind = Flag::Int;
  f.i = def;
  f.int_range = range;
  return f.i;
}

double& Cli::add_double(const std::string& name, double def, RealRange range, const std::string& help) {
  ENG_CHECK(range.contains(def), "cli: the default ", def, " of --", name, " is outside its range", range.text());
  Flag& f = add(name, help, general_text(def, 6));
  f.range_text = range.text();
  f.kind = Flag::Double;
  f.d = def;
  f.real_range = range;
  return f.d;
}

std::string& Cli::add_string(const std::string& name, const std::string& def, const std::string& help) {
  Flag& f = add(name, help, def.empty() ? "\"\"" : def);
  f.kind = Flag::String;
  f.s = def;
  return f.s;
}

bool& Cli::add_bool(const std::string& name, bool def, const std::string& help) {
  Flag& f = add(name, help, def ? "true" : "false");
  f.kind = Flag::Bool;
  f.b = def;
  return f.b;
}

std::vector<std::string>& Cli::add_list(const std::string& name, const std::string& help) {
  Flag& f = add(name, help, "none; repeatable");
  f.kind = Flag::List;
  return f.list;
}

void Cli::add_positionals(const std::string& usage, const std::string& help, size_t max) {
  positional_usage_ = usage;
  positional_help_ = help;
  max_positional_ = max;
}

void Cli::refuse(const std::string& name, const std::string& why) {
  ENG_CHECK(!by_name_.count(name), "cli: flag --", name, " is both declared and refused");
  refused_[name] = why;
}

std::vector<std::string> Cli::names() const {
  std::vector<std::string> names;
  for (const auto& f : flags_) names.push_back(f->name);
  return names;
}

bool Cli::was_set(const std::string& name) const {
  auto it = by_name_.find(name);
  return it != by_name_.end() && it->second->set;
}

std::string Cli::usage() const {
  return "usage: " + program_ + " [flags]" + (positional_usage_.empty() ? "" : " " + positional_usage_);
}

std::string Cli::help() const {
  std::string h = usage() + "\n" + summary_ + "\n";
  if (!positional_usage_.empty()) h += "\narguments:\n  " + positional_usage_ + ": " + positional_help_ + "\n";
  h += "\nflags:\n";
  for (const auto& f : flags_) {
    std::string left = "  --" + f->name;
    if (left.size() < 24) left.resize(24, ' ');
    h += left + " " + f->help + " (default " + f->def_text + (f->range_text.empty() ? "" : ";") + f->range_text +
         ")\n";
  }
  return h;
}

bool Cli::parse(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::fputs(help().c_str(), stdout);
      return false;
    }
    if (a.rfind("--", 0) != 0) {
      ENG_CHECK(positional_.size() < max_positional_, program_, ": unexpected argument '", a, "' (",
                positional_usage_.empty() ? "it takes no arguments besides flags" : usage(), "; see --help)");
      positional_.push_back(a);
      continue;
    }
    std::string name = a.substr(2), value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    auto it = by_name_.find(name);
    if (auto why = refused_.find(name); it == by_name_.end() && why != refused_.end())
      fail(program_, ": --", name, " ", why->second);
    ENG_CHECK(it != by_name_.end(), program_, ": unknown flag --", name, " (see --help)");
    Flag& f = *it->second;
    if (!has_value && f.kind == Flag::Bool) {
      // "--flag false" as well as "--flag=false": the word after a boolean is its value only if it is one.
      const bool word = i + 1 < argc && (std::string(argv[i + 1]) == "true" || std::string(argv[i + 1]) == "false");
      value = word ? argv[++i] : "true";
      has_value = true;
    }
    if (!has_value) {
      ENG_CHECK(i + 1 < argc, program_, ": flag --", name, " needs a value");
      value = argv[++i];
    }
    f.set = true;
    const std::string what = program_ + ": --" + name;
    switch (f.kind) {
      case Flag::Int: f.i = parse_int(value, f.int_range, what); break;
      case Flag::Double: f.d = parse_real(value, f.real_range, what); break;
      case Flag::String: f.s = value; break;
      case Flag::List: f.list.push_back(value); break;
      case Flag::Bool:
        ENG_CHECK(value == "true" || value == "false" || value == "1" || value == "0", what,
                  " expects true or false, got '", value, "'");
        f.b = value == "true" || value == "1";
        break;
    }
  }
  return true;
}

}  // namespace eng
