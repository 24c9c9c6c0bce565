// The runtime's commands (train, profile, validate): their flags, registered by the program
// (cmd_train.cpp, cmd_profile.cpp: parsing and range checks never load LibTorch), and their
// work, in the runtime plugin (run_train.cpp, run_profile.cpp), reached through
// runtime_plugin() (cli/runtime_plugin.h).
#pragma once

#include <string>
#include <vector>

#include "cli/common.h"
#include "profiler/collectives.h"
#include "profiler/layers.h"
#include "runtime/train.h"

namespace stagecraft::cli {

struct TrainFlags {
  PlanRequest plan;                // model and cluster-independent plan flags
  int nproc = 0;                   // local ranks to start; 0 = this process is one rank
  runtime::TrainOptions run;       // steps, seed, lr, backend, outputs
  std::vector<std::string> example_shape;  // a TorchScript model: its input's and target's shapes
};

struct ProfileOpts {
  profiler::LayerGridOptions grid;
  profiler::CollectiveOptions coll;
  int nproc = 2;
  std::string out;
  std::string gemm_calibration;  // a GPU calibration file to write instead (profiler/gemm_calibration.h)
  std::string gpu;               // the catalog GPU it is measured on
  bool quiet = false;  // no progress lines
};

struct ValidateOpts {
  std::string sweep;
  std::string profile;
  std::string out;
  std::string summary;
  std::string work_dir = "out/validate-work";
  bool no_sim = false;
  bool quiet = false;  // no elapsed and remaining time on the measured lines
};

// The plugin's side: the work of each command once its flags are parsed.
int run_train(const TrainFlags& f, const std::vector<std::string>& argv);  // the exit code
void run_profile(const ProfileOpts& o, int argc, char** argv);
void run_validate(const ValidateOpts& o);

}  // namespace stagecraft::cli
