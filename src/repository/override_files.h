// The folders of loads with file overrides (Triton's load with "file:<path>" parameters): each
// load writes its files into a new folder of its own under the temporary directory (no file
// outside it: paths are checked and nothing in it is a link), and the folders that exist at once
// are bounded, so that repeated loads cannot fill the temporary file system.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "common/status.h"
#include "request/model_info.h"

namespace nereid {

class OverrideFiles;

class OverrideFolders {
 public:
  // Limits on a load request's files (count; each path component, as the file system allows),
  // and on the folders of such loads that exist at once (each lives while its load runs and while
  // a version loaded from it does; see OverrideFiles).
  static constexpr size_t kMaxFiles = 4096;
  static constexpr size_t kMaxFolders = 256;
  static constexpr uint64_t kMaxBytes = uint64_t{2} << 30;

  OverrideFolders() = default;
  // Removes the folders still held (by versions abandoned at exit, whose threads may never
  // return).
  ~OverrideFolders();
  OverrideFolders(const OverrideFolders&) = delete;
  OverrideFolders& operator=(const OverrideFolders&) = delete;

  // Writes the files of a load of model 'name' into a new folder, within the bounds above.
  StatusOr<std::shared_ptr<OverrideFiles>> Write(const std::string& name, const ModelFiles& files);

  // The folders that exist now, and their bytes (shared with each folder, which leaves on its
  // removal).
  struct Live {
    std::mutex mu;
    std::set<std::string> dirs;
    uint64_t bytes = 0;
  };

 private:
  std::shared_ptr<Live> live_ = std::make_shared<Live>();
};

// One load's folder: removed when the last holder lets go. The load holds it while it runs, and
// each version loaded from it for as long as that version exists, so a reload, an unload or a
// failed load removes it once nothing reads it any more.
class OverrideFiles {
 public:
  OverrideFiles(std::shared_ptr<OverrideFolders::Live> live, std::string root,
                std::string model_dir, uint64_t bytes)
      : live_(std::move(live)),
        root_(std::move(root)),
        model_dir_(std::move(model_dir)),
        bytes_(bytes) {}
  ~OverrideFiles();
  OverrideFiles(const OverrideFiles&) = delete;
  OverrideFiles& operator=(const OverrideFiles&) = delete;
  const std::string& model_dir() const { return model_dir_; }

 private:
  std::shared_ptr<OverrideFolders::Live> live_;
  const std::string root_, model_dir_;
  const uint64_t bytes_;
};

}  // namespace nereid
