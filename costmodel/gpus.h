// The GPU catalog: one JSON file per GPU under presets/gpus/ (peaks per precision,
// memory, SMs, tiles, GEMM and memory efficiencies, clocks and the named clock calibration),
// each figure with its public source and the figures that are assumed rather than measured.
// A cluster names its GPU ("gpu": "h100-sxm") and states only the fields that truly differ;
// docs/costmodel.md "GPU catalog".
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "costmodel/specs.h"

namespace stagecraft::costmodel {

// The fields a catalog entry may give a cluster (ClusterSpec's GPU block), in file order.
const std::vector<std::string>& gpu_fields();
std::vector<std::string> gpu_preset_names();
// The catalog entry `name` as stored (with "sources" and "assumed"); InputError naming `field`
// and listing the catalog when there is no such GPU.
nlohmann::json gpu_entry(const std::string& name, const std::string& field = "cluster.gpu");

// A figure of a catalog GPU that is assumed rather than measured, as a cluster uses it.
struct AssumedFigure {
  std::string field;  // ClusterSpec field, e.g. "gemm_max_efficiency"
  std::string note;   // what is assumed and why (the catalog's "assumed" entry)
};

// A cluster's JSON with its "gpu" resolved: the catalog entry's fields under the cluster's own
// (which override them), "gpu" kept. Without "gpu" the JSON is returned as given.
nlohmann::json apply_gpu(const nlohmann::json& cluster);
// The catalog's assumed figures that `resolved` (a cluster's JSON after apply_gpu) still takes
// from the catalog: a field the cluster overrides with another value is the cluster's own.
std::vector<AssumedFigure> assumed_figures(const nlohmann::json& resolved);

// The assumed figures of the cluster's catalog GPU that pricing `m` on it uses: the flat
// achieved_efficiency only where compute by shape is off, the shape fields and clocks only where
// it is on, the FP8 efficiency only for an FP8 model. (field, why) as in ClusterSpec::gpu_assumed.
std::vector<std::pair<std::string, std::string>> used_assumptions(const ClusterSpec& c, const ModelSpec& m);
// One line on the clock the compute-bound kernels run at: the named calibration, the two clocks
// and the share of the measured rate, or why there is none.
std::string clock_line(const ClusterSpec& c);

// A GPU calibration (`estimate --gpu-calibration F`; written by `profile --gemm-calibration` on
// a GPU): the GEMM rate measured over seconds of back-to-back products, so at the clock the GPU
// holds, as a share of the dense bf16 peak, in place of the catalog's gemm_max_efficiency and
// clock ratio (both clocks become 0: the measurement includes the clock). Fields: "gpu" (the
// catalog GPU it was measured on; must be the cluster's), "gemm_max_efficiency" in (0, 1],
// optional "gemm_max_efficiency_fp8" and "memory_efficiency", optional "sm_clock_mhz" (the
// clock observed, for the record), optional "measured_tflops", "shapes" (what was swept) and
// "source" (required). InputError naming the field; `what` names the file.
void apply_gpu_calibration(ClusterSpec& c, const nlohmann::json& calibration, const std::string& what);

}  // namespace stagecraft::costmodel
