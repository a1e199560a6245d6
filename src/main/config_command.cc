#include "main/config_command.h"

#include <google/protobuf/text_format.h>

#include <filesystem>
#include <iostream>

#include "common/logging.h"
#include "main/server_options.h"
#include "repository/model_repository.h"
#include "runtime/backend_library.h"

namespace nereid {
namespace {

namespace fs = std::filesystem;

constexpr const char* kUsage = R"(usage:
  nereid config check PATH [MODEL ...]     validate without serving
  nereid config generate PATH [MODEL]      print the config a load would use (auto-completed)

PATH is a model repository or one model's directory (--model-repository=PATH works too; give it
several times for several repositories). 'check' reads every model in the repository, or the
MODELs named, the way a load does: config.pbtxt syntax, Triton's validation rules, the model files,
the backend's auto-complete, label files. It prints each error with file, line and field and exits
0 when every model is valid, 1 when one is not, 2 on a usage error. 'generate' prints one model's
config as config.pbtxt text (with auto-completed inputs, outputs and max_batch_size).

Server flags that change what a load does apply here too: --strict-model-config,
--disable-auto-complete-config, --backend-directory=PATH, --onnx-engine. Flags take the --flag=value
form.
)";

// True when 'dir' looks like one model rather than a repository: it has a config.pbtxt or a
// numeric version directory.
bool IsModelDirectory(const fs::path& dir) {
  std::error_code ec;
  if (fs::exists(dir / "config.pbtxt", ec)) return true;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory(ec) && !name.empty() &&
        name.find_first_not_of("0123456789") == std::string::npos)
      return true;
  }
  return false;
}

}  // namespace

int ConfigMain(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::cout << kUsage;
    return args.empty() ? 2 : 0;
  }
  const std::string verb = args[0];
  if (verb != "check" && verb != "generate") {
    std::cerr << "unknown config command '" << verb << "'\n\n" << kUsage;
    return 2;
  }
  std::vector<std::string> flags, positional;
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i].rfind("--", 0) == 0) {
      flags.push_back(args[i]);
      if (args[i] == "--model-repository" && i + 1 < args.size()) flags.push_back(args[++i]);
    } else {
      positional.push_back(args[i]);
    }
  }
  // A bare PATH first: a repository, or one model's directory (its parent is the repository).
  std::vector<std::string> models;
  if (!positional.empty() && fs::is_directory(positional[0])) {
    const fs::path path = fs::absolute(positional[0]).lexically_normal();
    const fs::path dir = path.filename().empty() ? path.parent_path() : path;
    if (IsModelDirectory(dir)) {
      flags.push_back("--model-repository=" + dir.parent_path().string());
      models.push_back(dir.filename().string());
    } else {
      flags.push_back("--model-repository=" + dir.string());
    }
    positional.erase(positional.begin());
  }
  models.insert(models.end(), positional.begin(), positional.end());

  auto options = ParseServerOptions(flags);
  if (!options.ok()) {
    std::cerr << "error: " << options.status().message() << "\n\n" << kUsage;
    return 2;
  }
  if (options->help) {
    std::cout << kUsage;
    return 0;
  }
  // Backends log what they load at INFO; a check prints its own report.
  GlobalLogSettings().info = options->log_verbose > 0;
  BackendManager backends(BackendDirectory(*options));
  if (Status engine = CheckEngine(backends, options->repository.onnx_engine); !engine.ok()) {
    std::cerr << "error: " << engine.message() << "\n";
    return 2;
  }
  ModelRepository repository(options->repository, &backends);
  if (models.empty()) {
    for (const auto& path : options->repository.paths)
      if (!fs::is_directory(path)) {
        std::cerr << "error: model repository path '" << path << "' is not a directory\n";
        return 2;
      }
    const auto on_disk = repository.ModelsOnDisk();
    models.assign(on_disk.begin(), on_disk.end());
  }

  if (verb == "generate") {
    if (models.size() != 1) {
      std::cerr << "error: 'config generate' prints one model's config; name one model (found "
                << models.size() << ")\n";
      return 2;
    }
    ModelRepository::CheckResult result = repository.Check(models[0]);
    if (!result.errors.empty()) {
      for (const auto& e : result.errors) std::cerr << "error: " << e << "\n";
      return 1;
    }
    std::string text;
    google::protobuf::TextFormat::Printer printer;
    printer.PrintToString(result.config, &text);
    std::cout << text;
    return 0;
  }

  size_t failed = 0;
  for (const auto& name : models) {
    ModelRepository::CheckResult result = repository.Check(name);
    if (result.errors.empty()) {
      std::cout << "ok      " << name << " (" << result.config.input_size() << " inputs, "
                << result.config.output_size() << " outputs, max_batch_size "
                << result.config.max_batch_size() << ")\n";
      continue;
    }
    ++failed;
    std::cout << "invalid " << name << "\n";
    for (const auto& e : result.errors) std::cout << "  " << e << "\n";
  }
  std::cout << models.size() << " model(s) checked, " << failed << " invalid\n";
  return failed == 0 ? 0 : 1;
}

}  // namespace nereid
