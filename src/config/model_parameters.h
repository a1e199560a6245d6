// Nereid's own numeric model parameters ("nereid.*" keys of a config's `parameters`, strings as
// Triton's are): each must be a finite number within its stated range, so that no config (which a
// client may send as a load override) turns into an undefined cast or a silent zero.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "config/model_config.pb.h"

namespace nereid {

// A number in [lo, hi]; 'out' is left as it was when the key is absent. "inf", "nan", "1e400" and
// text after the number are refused, naming the model, the key and the range.
Status NumberParameter(const inference::ModelConfig& config, const char* key, double lo, double hi,
                       double* out);
// A whole number in [0, hi] (digits only).
Status WholeNumberParameter(const inference::ModelConfig& config, const char* key, uint64_t hi,
                            uint64_t* out);

}  // namespace nereid
