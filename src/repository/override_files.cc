#include "repository/override_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/logging.h"

namespace nereid {
namespace fs = std::filesystem;

OverrideFolders::~OverrideFolders() {
  std::lock_guard<std::mutex> lock(live_->mu);
  for (const auto& dir : live_->dirs) {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
}

OverrideFiles::~OverrideFiles() {
  std::error_code ec;
  fs::remove_all(root_, ec);
  if (ec) LOG_WARNING << "cannot remove " << root_ << ": " << ec.message();
  std::lock_guard<std::mutex> lock(live_->mu);
  live_->dirs.erase(root_);
  live_->bytes -= bytes_;
}

StatusOr<std::shared_ptr<OverrideFiles>> OverrideFolders::Write(const std::string& name,
                                                                const ModelFiles& files) {
  const std::string failed = "failed to load '" + name + "', failed to poll from model repository";
  if (files.size() > kMaxFiles)
    return InvalidArgument(failed + ": more than " + std::to_string(kMaxFiles) +
                           " files in one load request");
  for (const auto& [path, bytes] : files) {
    // Relative, inside the model: no absolute path, no '..' or '.', no empty component, no NUL,
    // no component longer than a file name may be.
    bool ok = !path.empty() && path.front() != '/' && path.find('\0') == std::string::npos;
    bool too_long = false;
    for (size_t at = 0; ok && at <= path.size();) {
      const size_t end = std::min(path.find('/', at), path.size());
      const std::string part = path.substr(at, end - at);
      too_long = part.size() > 255;
      ok = !part.empty() && part != "." && part != ".." && !too_long;
      at = end + 1;
    }
    // A name the file system cannot hold is Triton's 500 (its QA asserts it); a path that
    // leaves the model directory is the client's error.
    if (too_long)
      return Internal(failed + ": file override path '" + path.substr(0, 300) +
                      "...' has a component longer than 255 bytes");
    if (!ok)
      return InvalidArgument(failed + ": file override path '" + path.substr(0, 300) +
                             "' is not a relative path inside the model directory");
  }
  uint64_t bytes = 0;
  for (const auto& [path, data] : files) bytes += data.size();
  std::error_code ec;
  const fs::path root = fs::temp_directory_path(ec);
  if (ec) return Internal(failed + ": no temporary directory: " + ec.message());
  std::string pattern = (root / "nereid-override-XXXXXX").string();
  {
    std::lock_guard<std::mutex> lock(live_->mu);
    Live& f = *live_;
    if (f.dirs.size() >= kMaxFolders || f.bytes + bytes > kMaxBytes)
      return ResourceExhausted(
          failed + ": the file overrides of loaded models hold " + std::to_string(f.dirs.size()) +
          " folder(s) and " + std::to_string(f.bytes) + " bytes; this load's " +
          std::to_string(bytes) + " bytes would pass the bound of " + std::to_string(kMaxFolders) +
          " folders and " + std::to_string(kMaxBytes) + " bytes");
    if (::mkdtemp(pattern.data()) == nullptr)
      return Internal(failed +
                      ": cannot create a directory for the model's files: " + std::strerror(errno));
    f.dirs.insert(pattern);
    f.bytes += bytes;
  }
  // The model directory is named after the model, as in a repository. Everything under it is
  // created here, fresh: a directory or file that exists already is refused (no link to follow).
  const fs::path dir = fs::path(pattern) / name;
  auto folder = std::make_shared<OverrideFiles>(live_, pattern, dir.string(), bytes);
  if (!fs::create_directory(dir, ec) || ec)
    return Internal(failed + ": " + (ec ? ec.message() : std::string("cannot create it")));
  for (const auto& [path, bytes] : files) {
    const fs::path file = dir / path;
    fs::create_directories(file.parent_path(), ec);
    if (ec) return Internal(failed + ": " + path + ": " + ec.message());
    const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0640);
    if (fd < 0) return Internal(failed + ": " + path + ": " + std::strerror(errno));
    size_t written = 0;
    while (written < bytes.size()) {
      const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
      if (n <= 0 && errno != EINTR) break;
      if (n > 0) written += static_cast<size_t>(n);
    }
    ::close(fd);
    if (written != bytes.size()) return Internal(failed + ": " + path + ": short write");
  }
  return folder;
}

}  // namespace nereid
