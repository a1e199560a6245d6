#include "variants.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace nereid::native {
namespace {

std::vector<std::string> Split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, sep)) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    out.push_back(item);
  }
  return out;
}

std::string Format(double d) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.4g", d);
  return text;
}

}  // namespace

StatusOr<AccuracyGuard> ParseAccuracyGuard(const std::string& text) {
  AccuracyGuard guard;
  for (const std::string& item : Split(text, ',')) {
    const size_t eq = item.find('=');
    const std::string key = item.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : item.substr(eq + 1);
    char* end = nullptr;
    const double d = std::strtod(value.c_str(), &end);
    if (value.empty() || end != value.c_str() + value.size() || !(d >= 0) || !std::isfinite(d))
      return InvalidArgument(
          "parameter 'nereid.accuracy_guard' expects top1=F,max_abs=F,max_rel=F "
          "with non-negative numbers, got '" +
          text + "'");
    if (key == "top1" && d <= 1)
      guard.min_top1 = d;
    else if (key == "max_abs")
      guard.max_abs = d;
    else if (key == "max_rel")
      guard.max_rel = d;
    else
      return InvalidArgument("parameter 'nereid.accuracy_guard': unknown or out-of-range '" + item +
                             "' (top1 in [0, 1], max_abs, max_rel)");
  }
  return guard;
}

StatusOr<std::vector<std::string>> ParseVariantList(const std::string& text,
                                                    const std::vector<std::string>& known) {
  std::vector<std::string> out;
  for (const std::string& name : Split(text, ',')) {
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      std::string names;
      for (const std::string& k : known) names += (names.empty() ? "" : ", ") + k;
      return InvalidArgument("parameter 'nereid.precision_variants': '" + name +
                             "' is no precision (" + names + ")");
    }
    if (std::find(out.begin(), out.end(), name) != out.end())
      return InvalidArgument("parameter 'nereid.precision_variants' names '" + name + "' twice");
    out.push_back(name);
  }
  if (out.empty() || out.size() > 8)
    return InvalidArgument("parameter 'nereid.precision_variants' must name 1 to 8 variants");
  return out;
}

StatusOr<Tensor> ReadNpy(const std::filesystem::path& file, size_t max_bytes) {
  const std::string name = file.filename().string();
  std::ifstream in(file, std::ios::binary);
  if (!in) return NotFound("cannot open calibration file '" + name + "'");
  char magic[8];
  if (!in.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0 || magic[6] < 1 || magic[6] > 3)
    return InvalidArgument("calibration file '" + name + "' is not a NumPy .npy file");
  size_t header_len = 0;
  unsigned char len[4] = {0, 0, 0, 0};
  if (magic[6] == 1) {
    if (!in.read(reinterpret_cast<char*>(len), 2))
      return InvalidArgument("'" + name + "' is cut short");
    header_len = len[0] | (len[1] << 8);
  } else {
    if (!in.read(reinterpret_cast<char*>(len), 4))
      return InvalidArgument("'" + name + "' is cut short");
    header_len = len[0] | (len[1] << 8) | (len[2] << 16) | (static_cast<size_t>(len[3]) << 24);
  }
  if (header_len > 65536) return InvalidArgument("'" + name + "': header too long");
  std::string header(header_len, '\0');
  if (!in.read(header.data(), static_cast<std::streamsize>(header_len)))
    return InvalidArgument("'" + name + "' is cut short");
  auto field = [&](const std::string& key) -> std::string {
    const size_t at = header.find("'" + key + "'");
    if (at == std::string::npos) return "";
    size_t start = header.find(':', at);
    if (start == std::string::npos) return "";
    ++start;
    while (start < header.size() && header[start] == ' ') ++start;
    const char open = header[start];
    const char close = open == '(' ? ')' : open;
    const size_t stop = header.find(close, start + 1);
    if (stop == std::string::npos) return "";
    return header.substr(start, stop - start + 1);
  };
  const std::string descr = field("descr"), shape = field("shape");
  DataType type;
  if (descr == "'<f4'")
    type = DataType::kFp32;
  else if (descr == "'<i4'")
    type = DataType::kInt32;
  else if (descr == "'<i8'")
    type = DataType::kInt64;
  else
    return InvalidArgument("calibration file '" + name + "' holds " + descr +
                           "; expected little-endian float32, int32 or int64");
  if (header.find("'fortran_order': False") == std::string::npos)
    return InvalidArgument("calibration file '" + name + "' must be in C order");
  std::vector<int64_t> dims;
  if (shape.size() < 2) return InvalidArgument("'" + name + "': no shape");
  for (const std::string& d : Split(shape.substr(1, shape.size() - 2), ',')) {
    if (d.empty()) continue;
    char* end = nullptr;
    const long long v = std::strtoll(d.c_str(), &end, 10);
    if (end != d.c_str() + d.size() || v < 0 || v > (int64_t{1} << 40))
      return InvalidArgument("'" + name + "': bad shape " + shape);
    dims.push_back(v);
  }
  if (dims.empty()) return InvalidArgument("'" + name + "': needs a rows dimension");
  __int128 bytes = DataTypeSize(type);
  for (int64_t d : dims) bytes *= d;
  if (bytes > static_cast<__int128>(max_bytes))
    return InvalidArgument("calibration file '" + name + "' holds more than the " +
                           std::to_string(max_bytes >> 20) + " MiB allowed");
  Tensor t = Tensor::Allocate(type, dims);
  if (!in.read(reinterpret_cast<char*>(t.mutable_raw()), static_cast<std::streamsize>(t.bytes())))
    return InvalidArgument("calibration file '" + name + "' is shorter than its shape " + shape);
  return t;
}

StatusOr<std::vector<std::pair<std::string, Tensor>>> ReadCalibration(
    const std::filesystem::path& model_dir, const std::string& subdir,
    const std::vector<std::pair<std::string, DataType>>& inputs) {
  namespace fs = std::filesystem;
  const fs::path rel(subdir);
  if (subdir.empty() || rel.is_absolute() ||
      std::any_of(rel.begin(), rel.end(), [](const fs::path& p) { return p == ".."; }))
    return InvalidArgument("calibration directory '" + subdir +
                           "' must be a relative path inside the model's directory");
  std::error_code ec;
  const fs::path root = fs::canonical(model_dir, ec);
  if (ec) return NotFound("cannot resolve the model directory");
  const fs::path dir = fs::weakly_canonical(root / rel, ec);
  const std::string root_s = root.string() + "/";
  if (ec || dir.string().rfind(root_s, 0) != 0)
    return InvalidArgument("calibration directory '" + subdir +
                           "' leads out of the model's directory");
  if (!fs::is_directory(dir))
    return NotFound("the accuracy guard needs calibration inputs in '" + subdir +
                    "/' of the model's directory (one <input>.npy per input)");
  constexpr size_t kMaxBytes = size_t{256} << 20;
  size_t total = 0;
  int64_t rows = -1;
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& [name, type] : inputs) {
    if (name.find('/') != std::string::npos || name == "." || name == "..")
      return InvalidArgument("input '" + name + "' cannot name a calibration file");
    const fs::path file = fs::weakly_canonical(dir / (name + ".npy"), ec);
    if (ec || file.string().rfind(root_s, 0) != 0)
      return InvalidArgument("calibration file for '" + name +
                             "' leads out of the model's directory");
    ASSIGN_OR_RETURN(Tensor t, ReadNpy(file, kMaxBytes - total));
    total += t.bytes();
    if (t.type() != type)
      return InvalidArgument("calibration file '" + name + ".npy' holds " +
                             std::string(DataTypeName(t.type())) + "; input '" + name + "' is " +
                             std::string(DataTypeName(type)));
    if (rows >= 0 && t.shape()[0] != rows)
      return InvalidArgument("calibration files disagree on their rows (" + std::to_string(rows) +
                             " and " + std::to_string(t.shape()[0]) + " in '" + name + ".npy')");
    rows = t.shape()[0];
    if (rows == 0) return InvalidArgument("calibration file '" + name + ".npy' has no rows");
    out.emplace_back(name, std::move(t));
  }
  return out;
}

Accuracy Compare(const std::vector<Tensor>& reference, const std::vector<Tensor>& variant) {
  Accuracy a;
  uint64_t rows = 0, agree = 0;
  double sum_err = 0, sum_ref = 0;
  for (size_t o = 0; o < reference.size() && o < variant.size(); ++o) {
    const Tensor& r = reference[o];
    const Tensor& v = variant[o];
    if (r.type() != DataType::kFp32 || v.type() != DataType::kFp32 ||
        r.elements() != v.elements() || r.elements() == 0)
      continue;
    const float* x = r.data<float>();
    const float* y = v.data<float>();
    const auto n = static_cast<size_t>(r.elements());
    double max_ref = 0, max_err = 0;
    for (size_t i = 0; i < n; ++i) {
      max_ref = std::max(max_ref, std::fabs(static_cast<double>(x[i])));
      const double e = std::fabs(static_cast<double>(x[i]) - static_cast<double>(y[i]));
      max_err = std::isnan(e) ? INFINITY : std::max(max_err, e);
      sum_err += std::isnan(e) ? INFINITY : e * e;
      sum_ref += static_cast<double>(x[i]) * x[i];
    }
    a.max_abs_error = std::max(a.max_abs_error, max_err);
    a.max_rel_error = std::max(a.max_rel_error, max_ref > 0 ? max_err / max_ref : max_err);
    const int64_t last = r.shape().empty() ? 1 : r.shape().back();
    if (last <= 1) continue;
    for (size_t row = 0; row + static_cast<size_t>(last) <= n; row += static_cast<size_t>(last)) {
      const float* xr = x + row;
      const float* yr = y + row;
      agree += std::max_element(xr, xr + last) - xr == std::max_element(yr, yr + last) - yr;
      ++rows;
    }
  }
  if (rows > 0) a.top1_agreement = static_cast<double>(agree) / static_cast<double>(rows);
  a.rms_rel_error = sum_ref > 0 ? std::sqrt(sum_err / sum_ref) : std::sqrt(sum_err);
  return a;
}

std::string GuardFailure(const AccuracyGuard& guard, const Accuracy& a) {
  std::string why;
  auto add = [&](const std::string& s) { why += (why.empty() ? "" : "; ") + s; };
  if (guard.min_top1 >= 0 && a.top1_agreement >= 0 && a.top1_agreement < guard.min_top1)
    add("top-1 agreement " + Format(a.top1_agreement) + " < " + Format(guard.min_top1));
  if (guard.max_abs >= 0 && !(a.max_abs_error <= guard.max_abs))
    add("max abs error " + Format(a.max_abs_error) + " > " + Format(guard.max_abs));
  if (guard.max_rel >= 0 && !(a.max_rel_error <= guard.max_rel))
    add("max rel error " + Format(a.max_rel_error) + " > " + Format(guard.max_rel));
  return why;
}

}  // namespace nereid::native
