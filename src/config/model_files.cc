#include "config/model_files.h"

#include <algorithm>
#include <fstream>

namespace nereid {
namespace fs = std::filesystem;

StatusOr<fs::path> ModelRelativePath(const fs::path& base, const std::string& name,
                                     const std::string& field) {
  const fs::path relative(name);
  if (name.empty() || name.find('\0') != std::string::npos)
    return InvalidArgument(field + " must name a file");
  if (relative.is_absolute() || relative.has_root_name() || relative.has_root_directory())
    return InvalidArgument(field + " '" + name +
                           "' must be a path relative to the model directory, not an absolute one");
  for (const auto& part : relative)
    if (part == "..")
      return InvalidArgument(field + " '" + name + "' must stay inside the model directory ('..')");
  return base / relative;
}

StatusOr<fs::path> ResolveModelFile(const fs::path& model_dir, const fs::path& base,
                                    const std::string& name, const std::string& field) {
  ASSIGN_OR_RETURN(fs::path path, ModelRelativePath(base, name, field));
  std::error_code ec;
  const fs::path real = fs::canonical(path, ec);
  if (ec) return NotFound(field + " '" + name + "' does not exist in the model directory");
  const fs::path root = fs::canonical(model_dir, ec);
  if (ec) return NotFound("the model directory cannot be read");
  const auto [root_end, real_it] =
      std::mismatch(root.begin(), root.end(), real.begin(), real.end());
  if (root_end != root.end())
    return InvalidArgument(field + " '" + name +
                           "' resolves outside the model directory (through a symlink)");
  if (!fs::is_regular_file(real, ec))
    return InvalidArgument(field + " '" + name + "' is not a regular file");
  return real;
}

StatusOr<std::vector<uint8_t>> ReadModelFileBytes(const fs::path& model_dir, const fs::path& base,
                                                  const std::string& name, const std::string& field,
                                                  uint64_t max_bytes, const std::string& what) {
  ASSIGN_OR_RETURN(fs::path path, ResolveModelFile(model_dir, base, name, field));
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) return NotFound(field + " '" + name + "' cannot be read");
  if (size > max_bytes)
    return InvalidArgument(field + " '" + name + "' has " + std::to_string(size) + " bytes; " +
                           what + " are limited to " + std::to_string(max_bytes));
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(field + " '" + name + "' cannot be read");
  std::vector<uint8_t> bytes(static_cast<size_t>(size) + 1);
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  const auto read = static_cast<size_t>(in.gcount());
  if (read > max_bytes)
    return InvalidArgument(field + " '" + name + "' grew past the limit of " + what +
                           " while read");
  bytes.resize(read);
  return bytes;
}

StatusOr<std::vector<std::string>> ReadLabelFile(const fs::path& model_dir, const std::string& name,
                                                 const std::string& field) {
  ASSIGN_OR_RETURN(
      std::vector<uint8_t> bytes,
      ReadModelFileBytes(model_dir, model_dir, name, field, kMaxLabelFileBytes, "label files"));
  // One label per line, as std::getline splits: a last line without '\n' counts, a final '\n'
  // ends the last line without starting another.
  std::vector<std::string> labels;
  size_t start = 0;
  for (size_t i = 0; i < bytes.size(); ++i)
    if (bytes[i] == '\n') {
      labels.emplace_back(bytes.begin() + start, bytes.begin() + i);
      start = i + 1;
    }
  if (start < bytes.size()) labels.emplace_back(bytes.begin() + start, bytes.end());
  return labels;
}

}  // namespace nereid
