// Precision variants of a native model (docs/precision.md): the list a config declares, the
// accuracy guard it states, the calibration inputs shipped in the model's directory, and the
// comparison of a variant's outputs with the fp32 reference's on them.
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "tensor.h"

namespace nereid::native {

// "nereid.accuracy_guard", e.g. "top1=0.995,max_abs=0.05,max_rel=0.02": the least top-1
// agreement and the largest absolute and relative errors a variant may show (< 0: unchecked).
struct AccuracyGuard {
  double min_top1 = -1, max_abs = -1, max_rel = -1;
  bool any() const { return min_top1 >= 0 || max_abs >= 0 || max_rel >= 0; }
};
StatusOr<AccuracyGuard> ParseAccuracyGuard(const std::string& text);

// "nereid.precision_variants", e.g. "tf32,bf16,int8": names checked against 'known', no repeats,
// at most 8.
StatusOr<std::vector<std::string>> ParseVariantList(const std::string& text,
                                                    const std::vector<std::string>& known);

// The calibration inputs: '<model dir>/<subdir>/<input>.npy' per graph input (NumPy's format,
// little-endian float32, int32 or int64, C order, shape [rows, dims...]), rows equal across
// inputs. 'subdir' must be a plain relative path inside the model's directory (no "..", no
// absolute path, no symlink leading out); at most 256 MiB in all.
StatusOr<std::vector<std::pair<std::string, Tensor>>> ReadCalibration(
    const std::filesystem::path& model_dir, const std::string& subdir,
    const std::vector<std::pair<std::string, DataType>>& inputs);
// One .npy file's tensor (exposed for tests).
StatusOr<Tensor> ReadNpy(const std::filesystem::path& file, size_t max_bytes);

// A variant's outputs against the reference's (same names, order and shapes; FP32 outputs count).
struct Accuracy {
  double top1_agreement = -1;  // rows whose arg-max over the last dimension agrees; -1: no output
                               // has a last dimension above 1
  double max_abs_error = 0;
  double max_rel_error = 0;  // max |error| / max |reference| per output, the largest of them
  double rms_rel_error = 0;  // sqrt(sum of squared errors / sum of squared references), all outputs
};
Accuracy Compare(const std::vector<Tensor>& reference, const std::vector<Tensor>& variant);
// Empty when 'a' passes 'guard'; else why not ("top-1 agreement 0.949 < 0.995").
std::string GuardFailure(const AccuracyGuard& guard, const Accuracy& a);

}  // namespace nereid::native
