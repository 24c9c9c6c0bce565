// Import of the frameworks' configs (configs/), --from on the commands, export and its round trip,
// check-run (docs/import.md). Expected values are the fixtures' (tests/data/import/README.md),
// derived by hand in the comments.
#include <gtest/gtest.h>

#include <cmath>

#include <array>
#include <cstdio>

#include "configs/emit.h"
#include "configs/import.h"
#include "configs/run_log.h"
#include "configs/toml.h"
#include "configs/yaml.h"
#include "presets/load.h"
#include "tests/helpers.h"

namespace stagecraft::test {
namespace {

using configs::Imported;
using costmodel::ModelSpec;
using costmodel::ParallelPlan;

std::string fixture(const std::string& name) { return data_path("import/" + name); }

Imported import_of(const std::string& name, configs::ImportOptions o = {}) { return configs::import_file(fixture(name), std::nullopt, o); }

bool listed(const std::vector<configs::ReportEntry>& es, const std::string& field) {
  for (const configs::ReportEntry& e : es)
    if (e.field == field) return true;
  return false;
}

// Every field of two models, compared through their JSON (name and source aside).
void expect_same_model(ModelSpec expected, const ModelSpec& actual) {
  expected.name = actual.name;
  expected.source = actual.source;
  EXPECT_EQ(costmodel::to_json(expected).dump(1), costmodel::to_json(actual).dump(1));
}

// Every field of two plans, compared through their JSON.
void expect_same_plan(const ParallelPlan& expected, const ParallelPlan& actual) {
  EXPECT_EQ(costmodel::to_json(expected).dump(1), costmodel::to_json(actual).dump(1));
}

// `m` as the frameworks train it in the fixtures: fp32 gradients (mixed precision), fused
// attention, no dropout.
ModelSpec mixed_precision_fused(ModelSpec m) {
  m.bytes_per_grad = 4;
  m.attention_kernel = costmodel::AttentionKernel::Fused;
  m.dropout = false;
  return m;
}

// A Llama 3 model as Megatron-LM runs it in the fixtures: 8 key/value heads of 128, sequence
// 8192, bf16 weights and activations, mixed_precision_fused.
ModelSpec llama3_megatron(int layers, int hidden, int heads, int ffn, int vocab) {
  ModelSpec m;
  m.kind = costmodel::ModelKind::Llama;
  m.num_layers = layers;
  m.hidden_size = hidden;
  m.num_heads = heads;
  m.num_kv_heads = 8;
  m.head_dim = 128;
  m.ffn_hidden_size = ffn;
  m.seq_length = 8192;
  m.vocab_size = vocab;
  m.bytes_per_param = m.bytes_per_activation = 2;
  return mixed_precision_fused(m);
}

// Llama 3 8B as Megatron-LM runs it in the fixtures: the dims of Meta-Llama-3-8B's config.json
// (32 layers, 4096, 32 heads, FFN 14336, vocabulary 128256, a multiple of 128 so not padded);
// --kv-channels 128, as the script gives it (= 4096 / 32).
ModelSpec llama3_8b_megatron() { return llama3_megatron(32, 4096, 32, 14336, 128256); }

// Megatron-Core's distributed optimizer with both overlaps, on Transformer Engine: what the
// Megatron-LM and Megatron-Bridge fixtures set on `p`.
ParallelPlan megatron_distributed_optimizer(ParallelPlan p) {
  p.zero = 1;
  p.overlap_grad_reduce = true;
  p.overlap_param_gather = true;
  p.stack = "megatron-core-te";
  return p;
}

TEST(ImportMegatron, Llama3_8bScriptFieldByField) {
  const Imported in = import_of("megatron_llama3_8b.sh");
  EXPECT_EQ(in.format, configs::Format::Megatron);
  ASSERT_TRUE(in.model);
  expect_same_model(llama3_8b_megatron(), *in.model);
  // torchrun --nproc_per_node $GPUS_PER_NODE (8) --nnodes $NUM_NODES (1): 8 GPUs; tp 1, pp 1,
  // cp 2 leave dp = 8 / 2 = 4; global batch 128 / (micro 1 * dp 4) = 32 microbatches.
  EXPECT_EQ(in.world_size, 8);
  EXPECT_EQ(in.nodes, 1);
  ParallelPlan p = plan_of(4, 1, 1, 32);
  p.cp = 2;
  expect_same_plan(megatron_distributed_optimizer(p), in.plan);
  EXPECT_TRUE(listed(in.report.not_modelled, "--normalization"));
  EXPECT_TRUE(listed(in.report.ignored, "--lr"));
  EXPECT_TRUE(listed(in.report.assumed, "--attention-backend"));
  EXPECT_TRUE(in.report.unknown.empty());
}

TEST(ImportMegatron, DeepSeekV3ScriptMoeMlaAndReport) {
  const Imported in = import_of("megatron_deepseek_v3.sh");
  ASSERT_TRUE(in.model);
  const ModelSpec preset = presets::load_model("deepseek-v3");
  const ModelSpec& m = *in.model;
  for (auto [a, b] : {std::pair{m.num_layers, preset.num_layers}, {m.hidden_size, preset.hidden_size}, {m.num_heads, preset.num_heads},
                      {m.q_lora_rank, preset.q_lora_rank}, {m.kv_lora_rank, preset.kv_lora_rank}, {m.qk_rope_head_dim, preset.qk_rope_head_dim},
                      {m.num_experts, preset.num_experts}, {m.experts_per_token, preset.experts_per_token},
                      {m.expert_ffn_hidden_size, preset.expert_ffn_hidden_size}, {m.num_shared_experts, preset.num_shared_experts},
                      {m.dense_layers, preset.dense_layers}, {m.moe_node_limit, preset.moe_node_limit}, {m.vocab_size, preset.vocab_size},
                      {m.ffn_hidden_size, preset.ffn_hidden_size}, {m.seq_length, preset.seq_length}})
    EXPECT_EQ(a, b);
  EXPECT_EQ(costmodel::head_dim(m), 128);
  EXPECT_EQ(costmodel::v_head_dim(m), 128);
  // 8 x 128 = 1024 GPUs over tp 2 * pp 8: dp 64; 16384 / (1 * 64) = 256 microbatches.
  EXPECT_EQ(in.plan.dp, 64);
  EXPECT_EQ(in.plan.num_microbatches, 256);
  EXPECT_EQ(in.plan.schedule, "interleaved-1f1b");
  EXPECT_EQ(in.plan.schedule_params.value("chunks", 0), 4);
  EXPECT_EQ(in.plan.ep, 64);
  EXPECT_TRUE(in.plan.sequence_parallel);
  EXPECT_EQ(in.plan.recompute, costmodel::RecomputePolicy::Selective);
  EXPECT_EQ(in.plan.recompute_modules, (std::vector<std::string>{"mla_up_proj", "mlp"}));
  EXPECT_EQ(in.plan.moe_dispatcher, "alltoall");
  EXPECT_TRUE(in.model->moe_layer_pattern.empty());  // ([0]*3+[1]*58): 3 dense layers, then all MoE
  EXPECT_EQ(in.plan.pipeline_layout, "Et|(tt|)*30mL");  // with --num-virtual-stages-per-pipeline-rank 4: 32 entries
  EXPECT_EQ(in.model->mtp_layers, 1);  // --mtp-num-layers 1
  ASSERT_EQ(in.report.unknown.size(), 1u);
  EXPECT_EQ(in.report.unknown[0].field, "--made-up-flag");
}

// A small Megatron-LM argument list with `extra` flags, on one node of 8 GPUs.
Imported megatron_args(const std::string& extra) {
  const std::string text = "N=2\ntorchrun --nproc-per-node $((N*4)) pretrain_gpt.py --num-layers 32 --hidden-size 1024 "
                           "--num-attention-heads 16 --seq-length 2048 --vocab-size 32000 --bf16 " + extra + "\n";
  return configs::import_text(text, configs::Format::Megatron, {}, "args");
}

// Megatron-Core's precision-aware optimizer: DeepSeek-V3's bf16 moments and gradients beside an
// fp32 master; the dtypes without --use-precision-aware-optimizer change nothing.
TEST(ImportMegatron, PrecisionAwareOptimizerStates) {
  const Imported a = megatron_args("--use-precision-aware-optimizer --main-grads-dtype bf16 --main-params-dtype fp32 "
                                   "--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16");
  EXPECT_EQ(a.model->bytes_per_moment, 2);
  EXPECT_EQ(a.model->bytes_per_grad, 2);
  EXPECT_EQ(a.model->bytes_per_master, 4);
  const Imported b = megatron_args("--exp-avg-dtype bf16");
  EXPECT_EQ(b.model->bytes_per_moment, 4);
  EXPECT_TRUE(listed(b.report.not_modelled, "--exp-avg-dtype"));
  const std::string e = error_of([] { megatron_args("--use-precision-aware-optimizer --exp-avg-dtype fp8 --exp-avg-sq-dtype bf16"); });
  EXPECT_NE(e.find("--exp-avg-dtype and --exp-avg-sq-dtype differ"), std::string::npos) << e;
}

TEST(ImportMegatron, FlagsOneByOne) {
  // $((N*4)) = 8 GPUs; pp 4 with 4 layers per virtual stage: 32 / (4 * 4) = 2 chunks.
  Imported a = megatron_args("--pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 4 --global-batch-size 16");
  configs::complete_plan(a, 0, "--gpus");
  EXPECT_EQ(a.world_size, 8);
  EXPECT_EQ(a.plan.dp, 2);
  EXPECT_EQ(a.plan.schedule, "interleaved-1f1b");
  EXPECT_EQ(a.plan.schedule_params.value("chunks", 0), 2);
  EXPECT_EQ(a.plan.num_microbatches, 8);  // 16 / (1 * 2)
  EXPECT_EQ(a.model->ffn_hidden_size, 4096);  // absent: 4h
  EXPECT_EQ(a.model->vocab_size, 32000);      // 32000 = 250 * 128
  EXPECT_EQ(a.model->bytes_per_grad, 4);
  // Partial recomputation: priced as full, and said so.
  const Imported b = megatron_args("--recompute-granularity full --recompute-method block --recompute-num-layers 2");
  EXPECT_EQ(b.plan.recompute, costmodel::RecomputePolicy::Full);
  EXPECT_TRUE(listed(b.report.not_modelled, "--recompute-method/--recompute-num-layers"));
  // Megatron FSDP's full sharding is zero 3; its --overlap-param-gather is the gather it always overlaps.
  const Imported c = megatron_args("--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params --overlap-param-gather");
  EXPECT_EQ(c.plan.zero, 3);
  EXPECT_FALSE(c.plan.overlap_param_gather);
  const Imported d = megatron_args("--fp8-format hybrid --fp8-recipe tensorwise --swiglu --tensor-model-parallel-size 2 --use-torch-fsdp2");
  EXPECT_TRUE(d.model->fp8);
  EXPECT_EQ(d.model->kind, costmodel::ModelKind::Llama);
  EXPECT_EQ(d.model->ffn_hidden_size, 2688);  // 8 * 1024 / 3 = 2730.7, rounded down to 64: 42 * 64
  EXPECT_EQ(d.plan.zero, 3);
  EXPECT_EQ(d.model->fp8_recipe, costmodel::Fp8Recipe::Current);  // Megatron's tensorwise
  // --moe-layer-freq 2: Megatron's [1 if i % 2 == 0 else 0], repeating [1, 0] from layer 0.
  const Imported e = megatron_args("--num-experts 8 --moe-layer-freq 2 --moe-token-dispatcher-type flex");
  EXPECT_EQ(e.model->dense_layers, 0);
  EXPECT_EQ(e.model->moe_layer_pattern, (std::vector<int>{1, 0}));
  EXPECT_EQ(e.plan.moe_dispatcher, "flex");
  // A list: one dense layer, then dense and MoE alternating (Llama 4 Maverick's shape).
  const Imported f = megatron_args("--num-experts 8 --moe-layer-freq '([0]*2+[1,0]*15)'");
  EXPECT_EQ(f.model->dense_layers, 2);
  EXPECT_EQ(f.model->moe_layer_pattern, (std::vector<int>{1, 0}));
  EXPECT_NE(error_of([] { megatron_args("--num-experts 8 --moe-layer-freq '[0,2]'"); }).find("--moe-layer-freq = '[0,2]' is invalid"),
            std::string::npos);
  EXPECT_NE(error_of([] { megatron_args("--tensor-model-parallel-size 2 --expert-tensor-parallel-size 4"); }).find("allowed: 1, or tp"),
            std::string::npos);
  // CUDA graphs (costmodel/host.h): Transformer Engine's scopes, Mamba's named as not priced; the
  // whole iteration; the older --enable-cuda-graph's whole layers; an unknown implementation.
  EXPECT_EQ(megatron_args("--swiglu --activation-func-clamp-value 7.0").model->activation_clamp, 7.0);
  const Imported h = megatron_args("--cuda-graph-impl transformer_engine --cuda-graph-scope attn moe_router moe_preprocess mamba");
  EXPECT_EQ(h.plan.cuda_graph_scope, (std::vector<std::string>{"attn", "moe_router", "moe_preprocess"}));
  EXPECT_TRUE(listed(h.report.not_modelled, "--cuda-graph-scope"));
  EXPECT_EQ(megatron_args("--cuda-graph-impl local --cuda-graph-scope full_iteration").plan.cuda_graph_scope,
            std::vector<std::string>{"full_iteration"});
  EXPECT_EQ(megatron_args("--enable-cuda-graph").plan.cuda_graph_scope, (std::vector<std::string>{"attn", "mlp", "moe"}));
  EXPECT_NE(error_of([] { megatron_args("--cuda-graph-impl cupti"); }).find("--cuda-graph-impl = 'cupti' is invalid"),
            std::string::npos);
  // --sequence-parallel at tp 1: off, as Megatron-LM turns it off (arguments.py), and said so;
  // at tp 2 it stays.
  const Imported sp1 = megatron_args("--sequence-parallel");
  EXPECT_FALSE(sp1.plan.sequence_parallel);
  EXPECT_TRUE(listed(sp1.report.assumed, "--sequence-parallel"));
  EXPECT_TRUE(megatron_args("--sequence-parallel --tensor-model-parallel-size 2").plan.sequence_parallel);
  // Stray blanks after a line's backslash, Windows line ends, a quoted value, a comment.
  const Imported g = megatron_args("--micro-batch-size 2 \\  \r\n  --recompute-granularity 'full' # all layers\r\n");
  EXPECT_EQ(g.plan.microbatch_size, 2);
  EXPECT_EQ(g.plan.recompute, costmodel::RecomputePolicy::Full);
}

TEST(ImportTorchtitan, JsonDumpEqualsTheToml) {
  configs::ImportOptions o;
  o.gpus = 8;
  const std::string toml = read_text(fixture("torchtitan_llama3_8b.toml"));
  const std::string dump = configs::parse_toml(toml, "toml").dump(2);
  EXPECT_EQ(configs::detect_format(dump, "dump"), configs::Format::Torchtitan);
  Imported a = configs::import_text(toml, configs::Format::Torchtitan, o, "toml");
  Imported b = configs::import_text(dump, configs::Format::Torchtitan, o, "dump");
  configs::complete_plan(a, 8, "--gpus");
  configs::complete_plan(b, 8, "--gpus");
  EXPECT_EQ(costmodel::to_json(a.plan).dump(), costmodel::to_json(b.plan).dump());
  EXPECT_EQ(costmodel::to_json(*a.model).dump(), costmodel::to_json(*b.model).dump());
}

TEST(ImportHf, FiveArchitecturesMatchThePresets) {
  // Each config.json's dims are the preset's (the presets cite the same released configs).
  for (auto [file, preset] : {std::pair{"hf_llama3_8b.json", "llama3-8b"}, {"hf_qwen3_30b_a3b.json", "qwen3-30b-a3b"},
                              {"hf_mixtral_8x7b.json", "mixtral-8x7b"}, {"hf_deepseek_v3.json", "deepseek-v3"}}) {
    SCOPED_TRACE(file);
    const Imported in = import_of(file);
    ASSERT_TRUE(in.model);
    EXPECT_FALSE(in.has_plan);
    const ModelSpec p = presets::load_model(preset);
    const ModelSpec& m = *in.model;
    EXPECT_EQ(m.kind, p.kind);
    EXPECT_EQ(m.num_layers, p.num_layers);
    EXPECT_EQ(m.hidden_size, p.hidden_size);
    EXPECT_EQ(m.num_heads, p.num_heads);
    EXPECT_EQ(costmodel::kv_heads(m), costmodel::kv_heads(p));
    EXPECT_EQ(costmodel::head_dim(m), costmodel::head_dim(p));
    EXPECT_EQ(m.vocab_size, p.vocab_size);
    EXPECT_EQ(m.num_experts, p.num_experts);
    EXPECT_EQ(m.experts_per_token, p.experts_per_token);
    if (m.num_experts) EXPECT_EQ(m.expert_ffn_hidden_size, p.expert_ffn_hidden_size);
    EXPECT_EQ(m.num_shared_experts, p.num_shared_experts);
    EXPECT_EQ(m.dense_layers, p.dense_layers);
    EXPECT_FALSE(m.dropout);
    EXPECT_TRUE(listed(in.report.ignored, "_comment"));
  }
}

TEST(ImportHf, Llama3_8bFieldByField) {
  // Meta-Llama-3-8B's config.json: no head_dim given (h / a), bfloat16 (2-byte weights, fp32
  // gradients assumed), dropout 0, the longest sequence 8192 as seq_length.
  const Imported in = import_of("hf_llama3_8b.json");
  ModelSpec m = llama3_8b_megatron();
  m.head_dim = 0;
  expect_same_model(m, *in.model);
  EXPECT_EQ(in.model->name, "llama");
  EXPECT_TRUE(listed(in.report.mapped, "max_position_embeddings"));
  EXPECT_TRUE(listed(in.report.ignored, "rope_theta"));
  EXPECT_TRUE(in.report.unknown.empty());
}

TEST(ImportHf, Gpt2AndGptOss) {
  // GPT-2: n_inner null is 4 * 768 = 3072 (assumed); dropout 0.1; 1024 positions.
  const Imported g = import_of("hf_gpt2.json");
  ModelSpec e;
  e.kind = costmodel::ModelKind::Gpt;
  e.num_layers = 12;
  e.hidden_size = 768;
  e.num_heads = 12;
  e.ffn_hidden_size = 3072;
  e.seq_length = 1024;
  e.vocab_size = 50257;
  e.bytes_per_grad = 4;  // fp32 gradients of mixed-precision training (torch_dtype absent: bf16 assumed)
  e.attention_kernel = costmodel::AttentionKernel::Fused;
  expect_same_model(e, *g.model);
  EXPECT_TRUE(listed(g.report.assumed, "n_inner"));
  // gpt-oss-20b: 24 layers, 32 experts of 2880, top 4, heads of 64 (64 * 64 = 4096, not 2880).
  const Imported o = import_of("hf_gpt_oss_20b.json");
  EXPECT_EQ(o.model->num_experts, 32);
  EXPECT_EQ(o.model->experts_per_token, 4);
  EXPECT_EQ(o.model->head_dim, 64);
  EXPECT_EQ(o.model->sliding_window, 128);
  EXPECT_EQ(o.model->sliding_window_pattern, (std::vector<int>{1, 0}));  // sliding, full, sliding, ...
  EXPECT_EQ(o.model->activation_clamp, 7.0);  // swiglu_limit
  EXPECT_DOUBLE_EQ(o.model->rope_mscale, 0.1 * std::log(32.0) + 1);  // YaRN, factor 32, no mscale
  EXPECT_TRUE(o.model->linear_bias);
  EXPECT_DOUBLE_EQ(import_of("hf_llama3_8b.json").model->rope_mscale, 1.0);
}

TEST(ImportTorchtitan, Llama3_8bJob) {
  configs::ImportOptions o;
  o.gpus = 64;  // the file's "preset for 64 A100 GPUs"
  const Imported in = import_of("torchtitan_llama3_8b.toml", o);
  EXPECT_EQ(in.format, configs::Format::Torchtitan);
  expect_same_model(mixed_precision_fused(presets::load_model("llama3-8b")), *in.model);  // model.name llama3, flavor 8B
  // data_parallel_shard_degree -1: FSDP over all 64; local batch 1 = one microbatch of 1.
  ParallelPlan p = plan_of(64, 1, 1, 1);
  p.zero = 3;
  p.recompute = costmodel::RecomputePolicy::Selective;
  p.stack = "pytorch-eager";
  expect_same_plan(p, in.plan);
  EXPECT_TRUE(listed(in.report.ignored, "optimizer.lr"));
  EXPECT_TRUE(in.report.unknown.empty());
}

TEST(ImportDeepspeed, Zero3WithHfModel) {
  configs::ImportOptions o;
  o.hf_config = fixture("hf_llama3_8b.json");
  const Imported in = import_of("deepspeed_zero3.json", o);
  EXPECT_EQ(in.format, configs::Format::Deepspeed);
  // dp = train_batch_size 512 / (micro 4 * accumulation 4) = 32.
  ParallelPlan p = plan_of(32, 1, 1, 4);
  p.microbatch_size = 4;
  p.zero = 3;
  p.overlap_grad_reduce = true;
  p.grad_bucket_bytes = 50000000.0 * 4;  // reduce_bucket_size in elements, fp32 gradients
  p.recompute = costmodel::RecomputePolicy::Full;
  p.stack = "pytorch-eager";
  expect_same_plan(p, in.plan);
  expect_same_model(mixed_precision_fused(presets::load_model("llama3-8b")), *in.model);
  EXPECT_TRUE(in.report.unknown.empty());
}

TEST(ImportBridge, Llama3_70bYamlPadsTheVocabulary) {
  configs::ImportOptions o;
  o.gpus = 64;
  const Imported in = import_of("bridge_llama3_70b.yaml", o);
  EXPECT_EQ(in.format, configs::Format::Bridge);
  // 64 / (tp 4 * pp 4 * cp 2) = dp 2; 256 / (1 * 2) = 128 microbatches; vp 5.
  ParallelPlan p = plan_of(2, 4, 4, 128);
  p.cp = 2;
  p.schedule = "interleaved-1f1b";
  p.schedule_params = {{"chunks", 5}};
  p.sequence_parallel = true;
  p.tp_overlap = schedules::TpOverlap::Te;
  expect_same_plan(megatron_distributed_optimizer(p), in.plan);
  // Meta-Llama-3-70B's dims; Megatron pads the vocabulary 128256 to a multiple of 128 * tp 4 =
  // 512: ceil(128256 / 512) = 251, 251 * 512 = 128512. mixed_precision bf16_mixed: Megatron's
  // fp32 gradients.
  expect_same_model(llama3_megatron(80, 8192, 64, 28672, 128512), *in.model);
  EXPECT_TRUE(in.report.unknown.empty());
}

TEST(ImportBridge, NemoOneLauncherEqualsTheMegatronScript) {
  const Imported a = import_of("nemo1_llama3_8b.yaml");
  const Imported b = import_of("megatron_llama3_8b.sh");
  expect_same_model(*b.model, *a.model);
  ParallelPlan pa = a.plan, pb = b.plan;
  pb.overlap_grad_reduce = pb.overlap_param_gather = false;  // the script's overlap flags, absent from the YAML
  EXPECT_EQ(costmodel::to_json(pa).dump(1), costmodel::to_json(pb).dump(1));
}

// ---- round trips: each exporter's output imported gives the plan back -----------------------

std::string written(const std::string& name, const std::string& text) {
  const std::string path = scratch_path(name);
  std::ofstream(path) << text;
  return path;
}

ParallelPlan round_trip(const std::string& format, const ModelSpec& m, const ParallelPlan& p, configs::ImportOptions o = {}) {
  const std::string text = configs::emit(format, m, p, 8, "--emit");
  const Imported in = configs::import_file(written("rt_" + format, text), configs::parse_format(format, "format"), o);
  EXPECT_TRUE(in.report.unknown.empty()) << text;
  return in.plan;
}

TEST(ImportRoundTrip, Megatron) {
  const ModelSpec m = presets::load_model("llama3-8b");
  ParallelPlan p = plan_of(2, 2, 2, 8);  // dp 2, tp 2, pp 2 on 8 GPUs, 8 microbatches
  p.schedule = "interleaved-1f1b";
  p.schedule_params = {{"chunks", 2}};
  p.sequence_parallel = true;
  p.recompute = costmodel::RecomputePolicy::Selective;
  p.zero = 1;
  p.overlap_grad_reduce = p.overlap_param_gather = true;
  p.tp_overlap = schedules::TpOverlap::Te;
  p.stack = "megatron-core-te";
  expect_same_plan(p, round_trip("megatron", m, p));
  ParallelPlan q = plan_of(4, 2, 1, 4);  // an MoE plan: ep 4 of whole experts, FSDP, full recompute
  q.ep = 4;
  q.etp = 1;
  q.sequence_parallel = true;
  q.zero = 3;
  q.recompute = costmodel::RecomputePolicy::Full;
  q.microbatch_size = 2;
  expect_same_plan(q, round_trip("megatron", presets::load_model("mixtral-8x7b"), q));
  // Llama 4 Maverick's alternating layers, the flex dispatcher and selective recomputation of the
  // MLP and the norms: plan and model both come back.
  ModelSpec maverick = presets::load_model("llama4-maverick");
  maverick.bytes_per_grad = 4;  // bf16 as Megatron-LM trains it (the preset's 2-byte gradients are named as not expressible)
  ParallelPlan r = plan_of(8, 1, 1, 2);
  r.ep = 8;
  r.moe_dispatcher = "flex";
  r.recompute = costmodel::RecomputePolicy::Selective;
  r.recompute_modules = {"layernorm", "mlp"};
  r.cuda_graph_scope = {"attn", "moe_router", "moe_preprocess"};
  const std::string text = configs::emit("megatron", maverick, r, 8, "--emit");
  const Imported in = configs::import_file(written("rt_maverick.sh", text), configs::Format::Megatron, {});
  expect_same_plan(r, in.plan);
  expect_same_model(maverick, *in.model);
  // The presets' 2-byte gradients go out as --bf16 --grad-reduce-in-bf16 and come back as 2 bytes.
  const std::string t8 = configs::emit("megatron", presets::load_model("llama3-8b"), plan_of(8, 1, 1, 1), 8, "--emit");
  EXPECT_NE(t8.find("--grad-reduce-in-bf16"), std::string::npos) << t8;
  const Imported b8 = configs::import_file(written("rt_8b.sh", t8), configs::Format::Megatron, {});
  EXPECT_EQ(costmodel::grad_bytes_per_param(*b8.model), 2);
}

TEST(ImportRoundTrip, Torchtitan) {
  const ModelSpec m = presets::load_model("llama3-8b");
  ParallelPlan p = plan_of(4, 2, 1, 2);  // HSDP: 2 copies of shard groups of 2
  p.microbatch_size = 2;
  p.sequence_parallel = true;
  p.zero = 3;
  p.shard_group = 2;
  p.reshard_after_forward = false;
  p.recompute = costmodel::RecomputePolicy::Full;
  p.stack = "pytorch-eager";
  expect_same_plan(p, round_trip("torchtitan", m, p));
  ParallelPlan q = plan_of(2, 1, 4, 8);  // a pipeline of 4 ranks, 2 chunks, FSDP over 2
  q.schedule = "interleaved-1f1b";
  q.schedule_params = {{"chunks", 2}};
  q.zero = 3;
  q.stack = "pytorch-eager";
  expect_same_plan(q, round_trip("torchtitan", m, q));
}

TEST(ImportRoundTrip, Deepspeed) {
  ParallelPlan p = plan_of(8, 1, 1, 4);
  p.microbatch_size = 2;
  p.zero = 1;  // (stagecraft refuses zero 2 over several microbatches)
  p.overlap_grad_reduce = true;
  p.grad_bucket_bytes = 2e8;
  p.recompute = costmodel::RecomputePolicy::Full;
  p.stack = "pytorch-eager";
  configs::ImportOptions o;
  o.hf_config = fixture("hf_llama3_8b.json");
  expect_same_plan(p, round_trip("deepspeed", presets::load_model("llama3-8b"), p, o));
}

TEST(ImportRoundTrip, NotExpressibleIsNamed) {
  ParallelPlan p = plan_of(1, 1, 4, 8);
  p.schedule = "zb-h1";
  p.stage_layers = {7, 9, 9, 7};
  const std::string text = configs::emit("megatron", presets::load_model("llama3-8b"), p, 8, "--emit");
  EXPECT_NE(text.find("--pipeline-model-parallel-layout 'Et*7|(t*9|)*2t*7L'"), std::string::npos) << text;
  EXPECT_NE(text.find("# not expressible in Megatron-LM: schedule zb-h1"), std::string::npos) << text;
}

// Megatron-Core's layout (the chunks come from its entries, as Megatron-LM derives them) and its
// split with the embedding and loss counted, written and read back (costmodel/pipeline_split.h).
TEST(ImportRoundTrip, MegatronPipelineSplit) {
  const ModelSpec m = presets::load_model("llama3-8b");  // 32 layers
  ParallelPlan p = plan_of(1, 1, 2, 8);
  p.schedule = "interleaved-1f1b";
  p.schedule_params = {{"chunks", 2}};
  p.pipeline_layout = "Et*7|(t*9|)*2t*7L";
  expect_same_plan(p, round_trip("megatron", m, p));
  ParallelPlan q = plan_of(1, 1, 2, 8);
  q.account_for_embedding = q.account_for_loss = true;
  expect_same_plan(q, round_trip("megatron", m, q));
  const std::string e = error_of([] {
    megatron_args("--pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2 "
                  "--pipeline-model-parallel-layout 'Et*16|t*16L'");  // one stage per rank
  });
  EXPECT_NE(e.find("--pipeline-model-parallel-layout has 1 stages per pipeline rank; the virtual pipeline flags give 2"),
            std::string::npos) << e;
  const Imported u = megatron_args("--pipeline-model-parallel-size 4 --decoder-first-pipeline-num-layers 5 "
                                   "--decoder-last-pipeline-num-layers 3");
  EXPECT_EQ(u.plan.stage_layers, (std::vector<int>{5, 12, 12, 3}));
  const Imported a = megatron_args("--pipeline-model-parallel-size 2 --pipeline-model-parallel-layout 'E|t*16|t*16|L'");
  EXPECT_EQ(a.plan.pipeline_layout, "E|t*16|t*16|L");
  EXPECT_EQ(a.plan.schedule, "interleaved-1f1b");
  EXPECT_EQ(a.plan.schedule_params.value("chunks", 0), 2);
}

// ---- the parsers' subsets ---------------------------------------------------------------------

TEST(ImportParsers, TomlAndYamlSubsets) {
  const nlohmann::json t = configs::parse_toml("a = 1 # c\n[b.c]\nd = \"x\"\ne = [1,\n 2]\nf = 3e-4\n[[g]]\nh = true\n", "t");
  EXPECT_EQ(t.dump(), R"({"a":1,"b":{"c":{"d":"x","e":[1,2],"f":0.0003}},"g":[{"h":true}]})");
  EXPECT_NE(error_of([] { configs::parse_toml("[a\nb = 1\n", "t"); }).find("line 1"), std::string::npos);
  const nlohmann::json y = configs::parse_yaml("a:\n  b: 1 # c\n  c: [x, 'y']\nd:\n- e: null\n  f: 2.5\n- g\n", "y");
  EXPECT_EQ(y.dump(), R"({"a":{"b":1,"c":["x","y"]},"d":[{"e":null,"f":2.5},"g"]})");
  EXPECT_NE(error_of([] { configs::parse_yaml("a:\n  b: 1\n    c: 2\n", "y"); }).find("line 3"), std::string::npos);
}

// Every fixture cut short at many places, and with a byte changed: each parse ends in a model
// and plan or in InputError (bad input, named), never another exception or a crash.
TEST(ImportParsers, TruncatedAndMangledFilesFailAsBadInput) {
  configs::ImportOptions o;
  o.gpus = 8;
  o.hf_config = fixture("hf_llama3_8b.json");
  int parsed = 0, refused = 0, variants = 0;
  for (auto [file, format] : {std::pair{"megatron_llama3_8b.sh", configs::Format::Megatron}, {"megatron_deepseek_v3.sh", configs::Format::Megatron},
                              {"bridge_llama3_70b.yaml", configs::Format::Bridge}, {"nemo1_llama3_8b.yaml", configs::Format::Bridge},
                              {"torchtitan_llama3_8b.toml", configs::Format::Torchtitan}, {"deepspeed_zero3.json", configs::Format::Deepspeed},
                              {"hf_deepseek_v3.json", configs::Format::Hf}, {"hf_gpt2.json", configs::Format::Hf}}) {
    const std::string text = read_text(fixture(file));
    for (size_t cut = 0; cut < text.size(); cut += 5) {
      for (const std::string& variant : {text.substr(0, cut), text.substr(0, cut) + "\x01:[{\"'=" + text.substr(cut)}) {
        ++variants;
        try {
          configs::Imported in = configs::import_text(variant, format, o, file);
          if (in.has_plan) configs::complete_plan(in, 8, "--gpus");
          ++parsed;
        } catch (const InputError&) {
          ++refused;
        } catch (const std::exception& e) {
          ADD_FAILURE() << file << " cut at " << cut << ": " << e.what();
        }
      }
    }
  }
  EXPECT_EQ(parsed + refused, variants);  // every variant parsed or refused as bad input
  EXPECT_GT(parsed, 0);  // guards: both outcomes exercised
  EXPECT_GT(refused, 0);
}

// ---- the command line ---------------------------------------------------------------------------

// The plan's flags, each field given by name (the "same values as flags" of the issue).
std::string flags_of(const ParallelPlan& p) {
  char bucket[64];
  std::snprintf(bucket, sizeof bucket, "%.17g", p.grad_bucket_bytes / (1024.0 * 1024.0));
  std::string f = " --dp " + std::to_string(p.dp) + " --tp " + std::to_string(p.tp) + " --pp " + std::to_string(p.pp) + " --cp " +
                  std::to_string(p.cp) + " --ep " + std::to_string(p.ep) + " --etp " + std::to_string(p.etp) + " --microbatch-size " +
                  std::to_string(p.microbatch_size) + " --microbatches " + std::to_string(p.num_microbatches) + " --schedule " + p.schedule +
                  " --recompute " + std::string(costmodel::recompute_name(p.recompute)) + " --zero " + std::to_string(p.zero) + " --stack " +
                  p.stack + " --tp-overlap " + std::string(schedules::tp_overlap_name(p.tp_overlap)) + " --grad-bucket-mb " + bucket;
  if (p.schedule_params.contains("chunks")) f += " --chunks " + p.schedule_params["chunks"].dump();
  if (p.sequence_parallel) f += " --sequence-parallel";
  if (p.overlap_grad_reduce) f += " --overlap-grad-reduce";
  if (p.overlap_param_gather) f += " --overlap-param-gather";
  if (p.zero == 3 && p.shard_group) f += " --shard-group " + std::to_string(p.shard_group);
  f += " --moe-dispatcher " + p.moe_dispatcher;
  for (const std::string& m : p.recompute_modules) f += " --recompute-modules " + m;
  if (!p.pipeline_layout.empty()) f += " --pipeline-layout '" + p.pipeline_layout + "'";
  if (p.account_for_embedding) f += " --account-for-embedding-in-pipeline-split";
  if (p.account_for_loss) f += " --account-for-loss-in-pipeline-split";
  return f;
}

// estimate --from FILE against estimate with the imported model's JSON and the plan as flags:
// the same JSON, to the bit.
void expect_from_equals_flags(const std::string& file, const std::string& extra, const std::string& cluster) {
  const std::string model = scratch_path("from_model.json"), plan = scratch_path("from_plan.json");
  const RunResult imp = run_cli("import " + fixture(file) + extra + " --out-model " + model + " --out-plan " + plan);
  ASSERT_EQ(imp.exit_code, 0) << imp.err;
  const ParallelPlan p = presets::load_plan_file(plan);
  const std::string hf = extra.find("--hf-config") != std::string::npos ? extra.substr(extra.find("--hf-config")) : "";
  const std::string nodes = " --nodes " + std::to_string(std::max(1, p.num_gpus() / 8));
  const RunResult a = run_cli("estimate --from " + fixture(file) + " " + hf + " --cluster " + cluster + nodes + " --json");
  const RunResult b = run_cli("estimate --model " + model + " --cluster " + cluster + nodes + flags_of(p) + " --json");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_EQ(a.out, b.out);
}

TEST(ImportCli, EstimateFromEqualsFlagsForEachFormat) {
  expect_from_equals_flags("megatron_llama3_8b.sh", "", "h100-nvl-ib-64");
  expect_from_equals_flags("nemo1_llama3_8b.yaml", "", "h100-nvl-ib-64");
  expect_from_equals_flags("bridge_llama3_70b.yaml", " --gpus 64", "h100-nvl-ib-64");
  expect_from_equals_flags("megatron_deepseek_v3.sh", "", "h100-ib-1024");
  expect_from_equals_flags("torchtitan_llama3_8b.toml", " --gpus 8", "h100-nvl-ib-64");
  expect_from_equals_flags("deepspeed_zero3.json", " --hf-config " + fixture("hf_llama3_8b.json"), "h100-ib-1024");
}

TEST(ImportCli, EstimateFromHfConfigEqualsTheModelFile) {
  const std::string model = scratch_path("hf_model.json");
  ASSERT_EQ(run_cli("import " + fixture("hf_qwen3_30b_a3b.json") + " --out-model " + model).exit_code, 0);
  const std::string plan = " --cluster h100-nvl-ib-64 --nodes 1 --tp 1 --ep 8 --microbatches 4 --seq-length 4096 --json";
  const RunResult a = run_cli("estimate --from " + fixture("hf_qwen3_30b_a3b.json") + plan);
  const RunResult b = run_cli("estimate --model " + model + plan);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
}

TEST(ImportCli, LaterFlagsOverrideTheFile) {
  // tp 2 over the script's tp 1: dp follows the world, 8 / (2 * 2) = 2; 128 / (1 * 2) = 64.
  const RunResult r = run_cli("estimate --from " + fixture("megatron_llama3_8b.sh") + " --cluster h100-nvl-ib-64 --tp 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["plan"]["tp"], 2);
  EXPECT_EQ(j["plan"]["dp"], 2);
  EXPECT_EQ(j["plan"]["num_microbatches"], 64);
  // --nodes 2: 16 GPUs, dp 16 / 2 = 8, 128 / 8 = 16 microbatches.
  const RunResult n = run_cli("estimate --from " + fixture("megatron_llama3_8b.sh") + " --cluster h100-nvl-ib-64 --nodes 2 --json");
  ASSERT_EQ(n.exit_code, 0) << n.err;
  const nlohmann::json k = nlohmann::json::parse(n.out);
  EXPECT_EQ(k["plan"]["dp"], 8);
  EXPECT_EQ(k["plan"]["num_microbatches"], 16);
}

TEST(ImportCli, EmitThenImportGivesThePlanBack) {
  const std::string flags = " --model llama3-8b --cluster h100-nvl-ib-64 --nodes 1 --tp 2 --pp 2 --schedule interleaved-1f1b --chunks 2 "
                            "--microbatches 8 --sequence-parallel --zero 1 --recompute selective --stack megatron-core-te";
  const RunResult e = run_cli("estimate" + flags + " --emit megatron");
  ASSERT_EQ(e.exit_code, 0) << e.err;
  const std::string script = written("emitted.sh", e.out), plan = scratch_path("emitted_plan.json");
  ASSERT_EQ(run_cli("import " + script + " --out-plan " + plan).exit_code, 0);
  const RunResult j = run_cli("estimate" + flags + " --json");
  ASSERT_EQ(j.exit_code, 0) << j.err;
  EXPECT_EQ(nlohmann::json::parse(j.out)["plan"].dump(1), costmodel::to_json(presets::load_plan_file(plan)).dump(1));
}

// plan --emit X, imported again, is the plan plan --out writes, for every X; each search kept to
// what X expresses (torchtitan: FSDP or none, PyTorch's kernels, no overlap flags; DeepSpeed: no
// sequence parallelism, no parameter-gather overlap).
TEST(ImportCli, PlanEmitThenImportForEveryFormat) {
  // Llama 3 8B from its config.json (bf16, fp32 gradients, as Megatron-LM and DeepSpeed train it),
  // and as torchtitan's llama3 8B flavor.
  const std::string base = " --cluster h100-nvl-ib-64 --nodes 1 --global-batch 16 --schedules 1f1b --quiet";
  const std::string hf = "plan --from " + fixture("hf_llama3_8b.json") + " --seq-length 8192" + base;
  const std::vector<std::array<std::string, 3>> cases = {
      {"megatron", hf + " --zero 0,1 --recompute none,selective,full", ""},
      {"torchtitan", "plan --model llama3-8b" + base + " --stack pytorch-eager --zero 0,3 --recompute none,full "
                     "--sequence-parallel on --no-overlap-grad-reduce --no-overlap-param-gather", ""},
      {"deepspeed", hf + " --stack pytorch-eager --zero 0,1 --recompute none,full --sequence-parallel off --no-overlap-param-gather",
       " --hf-config " + fixture("hf_llama3_8b.json")}};
  for (const auto& [format, space, import_extra] : cases) {
    SCOPED_TRACE(format);
    const std::string best = scratch_path("best_" + format + ".json"), back = scratch_path("back_" + format + ".json");
    const RunResult e = run_cli(space + " --out " + best + " --emit " + format);
    ASSERT_EQ(e.exit_code, 0) << e.err;
    EXPECT_EQ(e.out.find("not expressible"), std::string::npos) << e.out;
    const RunResult i = run_cli("import " + written("emitted_" + format, e.out) + " --format " + format + import_extra + " --out-plan " + back);
    ASSERT_EQ(i.exit_code, 0) << i.err;
    EXPECT_EQ(costmodel::to_json(presets::load_plan_file(best)).dump(1), costmodel::to_json(presets::load_plan_file(back)).dump(1));
  }
}

TEST(ImportCli, BadFilesExitTwoNamingTheField) {
  const std::string empty = written("empty.sh", "\n");
  const std::string truncated = written("trunc.json", "{\"model_type\": \"llama\", \"hidden_size\": 40");
  const std::string contra = written("contra.sh", "torchrun --nproc-per-node 6 pretrain_gpt.py --num-layers 2 --hidden-size 64 "
                                                  "--num-attention-heads 4 --seq-length 128 --vocab-size 1024 --tensor-model-parallel-size 3\n");
  const std::string world = written("world.sh", "torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 2 --hidden-size 96 "
                                                "--num-attention-heads 6 --seq-length 128 --vocab-size 1024 --tensor-model-parallel-size 3\n");
  const std::string flavor = written("flavor.toml", "[model]\nname = \"llama3\"\nflavor = \"3B\"\n");
  const std::string hf = written("bloom.json", "{\"model_type\": \"bloom\", \"hidden_size\": 64}");
  for (auto [args, want] : {std::pair{empty, "is empty"}, {truncated, "truncated"}, {contra + " --format torchtitan", "line 1"},
                            {contra, "--tensor-model-parallel-size = 3 does not divide --num-attention-heads = 4"},
                            {world, "--nproc-per-node * --nnodes = 8 is not a multiple of"}, {flavor, "model.flavor = '3B'"},
                            {hf, "model_type = 'bloom' is not known"}}) {
    const RunResult r = run_cli("import " + std::string(args));
    EXPECT_EQ(r.exit_code, 2) << args;
    EXPECT_NE(r.err.find(want), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  const RunResult w = run_cli("import " + written("unknown.sh", "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 "
                                                                 "--vocab-size 1024 --frobnicate 3\n") + " --gpus 1");
  EXPECT_EQ(w.exit_code, 0) << w.err;
  EXPECT_EQ(w.err, "stagecraft: warning: unknown field --frobnicate = 3 (not understood; left out)\n");
}

TEST(ImportCli, JsonAndClusterGuess) {
  // 128 nodes of 8 in the launcher: h100-ib-1024 (8 GPUs a node) scaled to 128 nodes.
  const std::string cluster = scratch_path("guess.json");
  const RunResult r = run_cli("import " + fixture("megatron_deepseek_v3.sh") + " --cluster h100-ib-1024 --out-cluster " + cluster + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["plan"]["dp"], 64);
  EXPECT_EQ(j["world_size"], 1024);
  EXPECT_EQ(j["report"]["unknown"][0]["field"], "--made-up-flag");
  EXPECT_EQ(nlohmann::json::parse(read_text(cluster)).dump(), R"({"extends":"h100-ib-1024","nodes":128})");
  EXPECT_EQ(presets::load_cluster(cluster).num_gpus(), 1024);
}

TEST(ImportCli, TrainFromAnArgumentList) {
  if (run_cli("--help").out.find("\n  train ") == std::string::npos) GTEST_SKIP() << "this build has no runtime (train)";
  // pp 2 over 2 ranks: dp 1; global batch 16 / (micro 2 * dp 1) = 8 microbatches of 2.
  const std::string args = written("tiny.args", "--num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 32 "
                                                "--vocab-size 256 --pipeline-model-parallel-size 2 --micro-batch-size 2 "
                                                "--global-batch-size 16\n");
  const std::string json = scratch_path("tiny_train.json");
  const RunResult r = run_cli("train --from " + args + " --attention-kernel materialized --nproc 2 --steps 2 --json " + json);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("(dp 1, tp 1, pp 2, 1f1b)"), std::string::npos) << r.out;
  const nlohmann::json j = nlohmann::json::parse(read_text(json));
  EXPECT_EQ(j["plan"]["num_microbatches"], 8) << j.dump().substr(0, 400);
}

// check-run of the fixture log `log` against the fixture config `from` on h100-nvl-ib-64, with `flags`.
RunResult check_run(const std::string& log, const std::string& from, const std::string& flags = "") {
  return run_cli("check-run " + fixture(log) + " --from " + fixture(from) + " --cluster h100-nvl-ib-64" + flags);
}

double predicted_iteration_s(const std::string& from) {
  const RunResult r = run_cli("estimate --from " + from + " --cluster h100-nvl-ib-64 --nodes 1 --json");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out)["iteration_time_s"].get<double>();
}

TEST(ImportCli, CheckRunMegatronLog) {
  // Iterations 2..6 after the first (warm-up): (14000 + 14350 + 13650 + 14000 + 14000) / 5 =
  // 14000 ms. TFLOP/s (543.6 + 530.3 + 557.5 + 543.6 + 543.6) / 5 = 2718.6 / 5 = 543.72; peak max
  // allocated 62464 MB = 61.00 GiB (rank 4).
  const RunResult r = check_run("megatron_llama3_8b.log", "megatron_llama3_8b.sh", " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["samples_used"], 5);
  EXPECT_DOUBLE_EQ(j["metrics"][0]["measured"].get<double>(), 14.0);
  EXPECT_DOUBLE_EQ(j["metrics"][0]["predicted"].get<double>(), predicted_iteration_s(fixture("megatron_llama3_8b.sh")));
  EXPECT_NEAR(j["metrics"][3]["measured"].get<double>(), 543.72, 1e-9);
  EXPECT_DOUBLE_EQ(j["metrics"][4]["measured"].get<double>(), 62464.0 * 1024 * 1024);
  const RunResult t = check_run("megatron_llama3_8b.log", "megatron_llama3_8b.sh");
  EXPECT_NE(t.out.find("iteration time"), std::string::npos);
  EXPECT_NE(t.out.find("14.000 s"), std::string::npos) << t.out;
  EXPECT_TRUE(t.err.empty()) << t.err;  // the log's "using world size: 8" is the config's
  const RunResult w = check_run("megatron_llama3_8b.log", "megatron_llama3_8b.sh", " --nodes 2");
  EXPECT_NE(w.err.find("the log's world size 8 is not the prediction's 16 GPUs"), std::string::npos) << w.err;
}

TEST(ImportCli, CheckRunNemoLog) {
  // NeMo's progress lines after the first: (14.2 + 13.9 + 14.1 + 14.0) / 4 = 56.2 / 4 = 14.05 s.
  const RunResult r = check_run("nemo_llama3_8b.log", "nemo1_llama3_8b.yaml", " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["format"], "nemo");
  EXPECT_EQ(j["first_iteration"], 1);
  EXPECT_NEAR(j["metrics"][0]["measured"].get<double>(), 14.05, 1e-12);
  EXPECT_DOUBLE_EQ(j["metrics"][0]["predicted"].get<double>(), predicted_iteration_s(fixture("nemo1_llama3_8b.yaml")));
  const RunResult bad = check_run("hf_gpt2.json", "nemo1_llama3_8b.yaml");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("no iteration lines found"), std::string::npos) << bad.err;
}

TEST(ImportCli, CheckRunTorchtitanLog) {
  // 8 GPUs, FSDP over 8, local batch 1 of 8192 tokens: 65536 tokens an iteration. After step 10:
  // 65536 / (6400 * 8) = 1.28 s, 65536 / (6600 * 8) = 1.2412121..., 65536 / (6500 * 8) =
  // 1.2603077...; mean 1.2605066 s. Peak memory 55.02 GiB (step 20).
  const RunResult r = check_run("torchtitan_llama3_8b.log", "torchtitan_llama3_8b.toml", " --nodes 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  const double mean = (65536.0 / 51200 + 65536.0 / 52800 + 65536.0 / 52000) / 3;
  EXPECT_NEAR(j["metrics"][0]["measured"].get<double>(), mean, 1e-12);
  EXPECT_NEAR(mean, 1.2605066, 1e-7);
  EXPECT_DOUBLE_EQ(j["metrics"][0]["predicted"].get<double>(), predicted_iteration_s(fixture("torchtitan_llama3_8b.toml")));
  EXPECT_NEAR(j["metrics"].back()["measured"].get<double>(), 55.02 * 1024 * 1024 * 1024, 1);
}

}  // namespace
}  // namespace stagecraft::test
