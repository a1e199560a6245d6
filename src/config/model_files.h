// Files a model's config names (label_filename, default_model_filename): they must lie inside that
// model's own directory. A config can come from a client (the load API's config override), so a
// name like "/etc/passwd", "../other/secret" or a symlink pointing out of the model is refused, and
// refused without looking at the file system first, so the answer tells nothing about what exists
// outside the model.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "common/status.h"

namespace nereid {

// Checks a relative file name from a config (no absolute path, no "..", no empty component) and
// returns 'base'/'name'. 'field' names the config field in errors. Touches no file.
StatusOr<std::filesystem::path> ModelRelativePath(const std::filesystem::path& base,
                                                  const std::string& name,
                                                  const std::string& field);

// ModelRelativePath, then requires that the path exists, is a regular file and, with symlinks
// resolved, still lies inside 'model_dir'.
StatusOr<std::filesystem::path> ResolveModelFile(const std::filesystem::path& model_dir,
                                                 const std::filesystem::path& base,
                                                 const std::string& name, const std::string& field);

// ResolveModelFile, then the file's bytes, refused past 'max_bytes' (checked before reading and
// while reading, for a file that grows meanwhile); 'what' names such files in that error.
StatusOr<std::vector<uint8_t>> ReadModelFileBytes(const std::filesystem::path& model_dir,
                                                  const std::filesystem::path& base,
                                                  const std::string& name, const std::string& field,
                                                  uint64_t max_bytes, const std::string& what);

// Labels for the classification extension: one per line, at most kMaxLabelFileBytes in all.
constexpr uint64_t kMaxLabelFileBytes = 64ull << 20;
StatusOr<std::vector<std::string>> ReadLabelFile(const std::filesystem::path& model_dir,
                                                 const std::string& name, const std::string& field);

}  // namespace nereid
