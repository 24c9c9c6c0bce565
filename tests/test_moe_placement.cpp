// Expert parallelism placed on NVLink domains (issue 48): DeepSeek-V3 planned on four GB200 NVL72
// racks used 64 GPUs each (--gpus-used-per-node 64, as Megatron-Bridge's launcher places a
// 256-GPU job) keeps every expert-parallel group inside one rack, where its all-to-all runs on
// NVLink. The same 256 GPUs taken as the first 256 of four full 72-GPU racks (--gpus 256) cut
// groups across racks, whose all-to-alls are then priced at the NICs' speed: the plans are
// slower by far.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "helpers.h"

using stagecraft::test::run_cli;

namespace {

nlohmann::json plan(const std::string& placement) {
  const auto r = run_cli("plan --model deepseek-v3 --cluster gb200-nvl72-1152 --nodes 4 " + placement +
                         " --global-batch 4096 --tp 1 --pp 4 --ep 32,64 --microbatch-sizes 1 --zero 1 --schedules 1f1b"
                         " --recompute none --sequence-parallel off --top 3 --json --quiet");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out);
}

}  // namespace

TEST(MoePlacement, DeepSeekV3PlansKeepExpertGroupsInsideARack) {
  const nlohmann::json racks = plan("--gpus-used-per-node 64"), cut = plan("--gpus 256");
  ASSERT_FALSE(racks.at("best").empty());
  for (const auto& c : racks.at("best")) {
    const int group = c.at("plan").at("tp").get<int>() * c.at("plan").at("ep").get<int>();
    EXPECT_EQ(64 % group, 0) << c.dump();  // consecutive ranks from a rack's first GPU: inside it
  }
  const double inside = racks.at("best").at(0).at("iteration_time_s").get<double>();
  const double across = cut.at("best").at(0).at("iteration_time_s").get<double>();
  EXPECT_GT(across, 2 * inside);
}
