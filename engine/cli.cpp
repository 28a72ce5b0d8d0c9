#include "engine/cli.h"

#include <cstdio>

#include "engine/error.h"

namespace eng {

struct Cli::Flag {
  enum Kind { Int, Double, String, Bool, List } kind;
  std::string name, help, def_text;
  int64_t i = 0;
  double d = 0;
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

int64_t& Cli::add_int(const std::string& name, int64_t def, const std::string& help) {
  Flag& f = add(name, help, std::to_string(def));
  f.kind = Flag::Int;
  f.i = def;
  return f.i;
}

double& Cli::add_double(const std::string& name, double def, const std::string& help) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", def);
  Flag& f = add(name, help, buf);
  f.kind = Flag::Double;
  f.d = def;
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

bool Cli::was_set(const std::string& name) const {
  auto it = by_name_.find(name);
  return it != by_name_.end() && it->second->set;
}

std::string Cli::help() const {
  std::string h = "usage: " + program_ + " [flags]\n" + summary_ + "\n\nflags:\n";
  for (const auto& f : flags_) {
    std::string left = "  --" + f->name;
    if (left.size() < 24) left.resize(24, ' ');
    h += left + " " + f->help + " (default " + f->def_text + ")\n";
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
    ENG_CHECK(it != by_name_.end(), program_, ": unknown flag --", name, " (see --help)");
    Flag& f = *it->second;
    if (!has_value && f.kind == Flag::Bool) {
      value = "true";
      has_value = true;
    }
    if (!has_value) {
      ENG_CHECK(i + 1 < argc, program_, ": flag --", name, " needs a value");
      value = argv[++i];
    }
    f.set = true;
    size_t pos = 0;
    try {
      switch (f.kind) {
        case Flag::Int: f.i = std::stoll(value, &pos); break;
        case Flag::Double: f.d = std::stod(value, &pos); break;
        case Flag::String: f.s = value; pos = value.size(); break;
        case Flag::List: f.list.push_back(value); pos = value.size(); break;
        case Flag::Bool:
          ENG_CHECK(value == "true" || value == "false" || value == "1" || value == "0", program_, ": flag --", name,
                    " expects true or false, got '", value, "'");
          f.b = value == "true" || value == "1";
          pos = value.size();
          break;
      }
    } catch (const std::invalid_argument&) {
      pos = std::string::npos;
    } catch (const std::out_of_range&) {
      pos = std::string::npos;
    }
    const bool text = f.kind == Flag::String || f.kind == Flag::List;
    ENG_CHECK(pos == value.size() && (text || !value.empty()), program_, ": flag --", name, " expects ",
              f.kind == Flag::Int ? "an integer" : "a number", ", got '", value, "'");
  }
  return true;
}

}  // namespace eng
