// Ensembles (platform "ensemble") checked as Triton checks them, with Triton's messages (its QA
// compares them): the wiring of ensemble_scheduling on its own, before anything loads, and the
// composing models' configs against it once they have loaded.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "config/model_config.h"

namespace nereid {

// Reports one problem: the field's path (for file:line), its name, Triton's message.
using ConfigFail = std::function<void(const std::vector<ConfigLocator::Step>& path,
                                      const std::string& field, const std::string& message)>;

// The first problem of an ensemble's config on its own (fields that ensembles may not have,
// missing steps or maps, tensors written twice, inputs and outputs no step uses or writes,
// tensors nothing reads), as Triton reports the first. No-op for other platforms.
void EnsembleStructureErrors(const inference::ModelConfig& config, const ConfigFail& fail);

// The models an ensemble's steps name, each once, in step order.
std::vector<std::string> EnsembleDependencies(const inference::ModelConfig& config);

// Whether two shapes agree, -1 on either side matching any size.
bool DimsMatch(const std::vector<int64_t>& a, const std::vector<int64_t>& b);

// The ensemble against the configs of its steps' models ('steps[i]' for step i, as loaded):
// every mapped input and output exists, every required input is mapped, each ensemble tensor has
// one data type and a compatible shape wherever it appears, and each model that batches allows at
// least the ensemble's batch size (one that does not batch takes the batch in its shape).
Status CheckEnsembleSteps(const inference::ModelConfig& ensemble,
                          const std::vector<const inference::ModelConfig*>& steps);

}  // namespace nereid
