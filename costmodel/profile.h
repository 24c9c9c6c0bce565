// Measured costs: what `stagecraft profile` writes and what the cost model reads through
// --profile instead of its analytic guesses. Layer timings over a grid of shapes, activation
// bytes, collective times against message size, the optimizer step. Between measured points
// the lookups interpolate (linearly in FLOPs, or in bytes for collectives); outside them they
// scale the nearest point by FLOPs (or bytes) and say that they extrapolated.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "costmodel/specs.h"

namespace stagecraft::costmodel {

struct Measurement {   // one timed quantity over repeated runs after warm-up
  double median_s = 0;
  double min_s = 0;
  double max_s = 0;
  int runs = 0;
};

// The median, extremes and count of repeated timings (seconds). Throws InputError when empty.
Measurement measurement_of(const std::vector<double>& times_s);

struct LayerProfile {
  std::string kind = "transformer";  // "transformer", "embedding" or "head"
  std::string model_kind = "gpt";    // ModelKind name the layer was built as
  std::string attention_kernel = "materialized";  // AttentionKernel name its attention ran as
  std::string precision = "fp32";    // how it ran: fp32, or bf16 (autocast: bf16 products, fp32
                                     // weights); its bytes scale to a model's by 4 or 2 bytes
  int hidden_size = 0;
  int num_heads = 0;
  int num_kv_heads = 0;              // key/value heads (grouped-query attention); 0: num_heads
  int ffn_hidden_size = 0;
  int seq_length = 0;
  int vocab_size = 0;                // embedding and head
  int microbatch_size = 1;
  int tp = 1;                        // tensor-parallel degree of the shard timed; its all-reduces are not
                                     // in the times (they come from the collectives)
  Measurement forward;
  Measurement backward;              // full backward
  Measurement backward_input;        // I
  Measurement backward_weight;       // W
  Measurement recompute;             // forward again from the saved input
  double activation_bytes = 0;       // saved for the backward, one microbatch, no recomputation
  double checkpoint_bytes = 0;       // saved with full recomputation
  double backward_working_bytes = 0; // peak of one backward above what it started with, its output
                                     // gradient included (head: of the head and one layer under
                                     // it, as a last stage runs them); 0: not measured
  // With selective recomputation (transformer layers): what the layer saves when its attention
  // core keeps only q, k and v, and the backward's working set with the core recomputed in it;
  // 0: not measured (Korthikanti's selective formula applies).
  double selective_activation_bytes = 0;
  double selective_backward_working_bytes = 0;
  // What a split backward's I leaves for its W (transformer and head): the deferred weight
  // gradients' inputs and output gradients; 0: not measured.
  double weight_kept_bytes = 0;
};

struct CollectiveProfile {
  std::string op;        // "p2p", "all_reduce", "all_gather", "reduce_scatter"
  int ranks = 2;
  double bytes = 0;      // message (p2p) or whole buffer (collectives)
  Measurement time;
  double algbw_Bps = 0;  // bytes / time
  double busbw_Bps = 0;  // algorithm bandwidth x the nccl-tests factor of the op
};

struct Profile {
  nlohmann::json device = nlohmann::json::object();  // kind, name, threads, software versions, backend
  std::vector<LayerProfile> layers;
  std::vector<CollectiveProfile> collectives;
  double optimizer_s_per_param = 0;  // AdamW step time over parameters (0: not measured)
  std::string source;                // file it came from, for messages
};

nlohmann::json to_json(const Profile& p);
Profile profile_from_json(const nlohmann::json& j);  // throws InputError naming the field
// A precision name as profiles and sweeps give it (fp32 or bf16); InputError "`what` = 'value' is
// invalid (allowed: fp32, bf16)" otherwise.
void check_precision_name(const std::string& value, const std::string& what);
Profile load_profile(const std::string& path);

// One layer's costs for a model, microbatch size and tp degree, from a profile.
struct LayerCost {
  double f_s = 0, b_s = 0, i_s = 0, w_s = 0, r_s = 0;
  double activation_bytes = 0, checkpoint_bytes = 0;
  double backward_working_bytes = 0;  // 0: not measured (the analytic estimate applies)
  double selective_activation_bytes = 0, selective_backward_working_bytes = 0;  // 0: not measured
  double weight_kept_bytes = 0;  // 0: not measured
  bool extrapolated = false;   // outside the measured grid
  std::string note;            // what was interpolated or extrapolated from
};
// kind: "transformer", "embedding" or "head". Throws InputError if the profile has no layer of
// that kind.
LayerCost profiled_layer(const Profile& p, const std::string& kind, const ModelSpec& m, int b, int tp);
// A latency-bandwidth line t = alpha + beta * bytes fitted to the measured medians of one op and
// rank count (Hockney's model), by least squares on the relative error so that small and large
// messages weigh alike; alpha and beta are kept >= 0. Used for point-to-point transfers (a
// link): small messages over loopback scatter by 2-10x from run to run, so a line through all
// of them predicts better than joining neighbouring points.
struct CollectiveFit {
  double alpha_s = 0;           // latency
  double beta_s_per_byte = 0;   // inverse bandwidth
  double min_bytes = 0, max_bytes = 0;  // measured range
  int points = 0;               // measurements fitted (0: none of that op and rank count)
  double at(double bytes) const { return alpha_s + beta_s_per_byte * bytes; }
};
CollectiveFit fit_collective(const Profile& p, const std::string& op, int ranks);

// Time of an op of `bytes` over `ranks`: p2p from the fitted line; collectives from their
// measured curve, interpolated linearly between sizes (their algorithms switch with size: Gloo's
// all-reduce steps up 3-4x between 16 and 64 KiB here, which a line would smooth away), the
// smallest size's time below it and scaled by bytes above the largest. Returns < 0 if the
// profile has no measurement of that op and rank count. `extrapolated` (if given) says whether
// `bytes` lies outside the measured range.
double profiled_collective_s(const Profile& p, const std::string& op, int ranks, double bytes, bool* extrapolated);

// The cluster with its intra-node link's latency and bandwidth replaced by the fitted
// point-to-point line of the profile (alpha, 1/beta), so that the evaluator's links and the
// simulator's platform time a transfer as the profile does; unchanged when the profile has no
// p2p measurements. Appends what it did to `notes`.
ClusterSpec calibrated_cluster(const ClusterSpec& c, const Profile& p, std::vector<std::string>* notes);

}  // namespace stagecraft::costmodel
