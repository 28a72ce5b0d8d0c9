#include "tools/train/task.h"

#include "engine/error.h"

namespace eng::jobs {
namespace {

std::map<std::string, TaskInfo>& registry() {
  static std::map<std::string, TaskInfo> r;
  return r;
}

}  // namespace

bool register_task(TaskInfo task) {
  ENG_CHECK(!registry().count(task.name), "train: task '", task.name, "' registered twice");
  const std::string name = task.name;
  registry()[name] = std::move(task);
  return true;
}

const std::map<std::string, TaskInfo>& registered_tasks() { return registry(); }

const TaskInfo& find_task(const std::string& name) {
  auto it = registry().find(name);
  ENG_CHECK(it != registry().end(), "train: unknown task '", name, "' (", join_names(task_names(), " or "), ")");
  return it->second;
}

std::vector<std::string> task_names(const std::function<bool(const TaskInfo&)>& pick) {
  std::vector<std::string> names;
  for (const auto& [name, task] : registry())
    if (!pick || pick(task)) names.push_back(name);
  return names;
}

std::string join_names(const std::vector<std::string>& names, const std::string& last) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) s += (i == 0 ? "" : i + 1 == names.size() ? last : ", ") + names[i];
  return s;
}

}  // namespace eng::jobs
