# DeepSeek-V3 pre-training on 128 nodes of 8 H100s with Megatron-LM: tp 2, pp 8, vp 4, ep 64,
# sequence parallel, global batch 16384, micro batch 1, bf16, recompute modules mla_up_proj and
# mlp (NVIDIA-NeMo/Megatron-Bridge 067f987df03b8355b03192d88d70f1709fedf51a,
# src/megatron/bridge/perf_recipes/deepseek/h100/deepseek_v3.py,
# deepseek_v3_pretrain_1024gpu_h100_bf16_config). Model: deepseek-ai/DeepSeek-V3 config.json
# (huggingface.co/deepseek-ai/DeepSeek-V3): 61 layers, the first 3 dense, 256 routed experts of
# 2048 and 1 shared, top 8, 8 groups of which 4 per token, MLA ranks 1536/512, heads of 128 + 64.
torchrun --nproc-per-node 8 --nnodes 128 pretrain_gpt.py \
  --num-layers 61 --hidden-size 7168 --ffn-hidden-size 18432 --num-attention-heads 128 \
  --swiglu --untie-embeddings-and-output-weights --seq-length 4096 --vocab-size 129280 \
  --multi-latent-attention --q-lora-rank 1536 --kv-lora-rank 512 --qk-head-dim 128 \
  --qk-pos-emb-head-dim 64 --v-head-dim 128 \
  --num-experts 256 --moe-router-topk 8 --moe-ffn-hidden-size 2048 \
  --moe-shared-expert-intermediate-size 2048 --moe-layer-freq '([0]*3+[1]*58)' \
  --moe-router-num-groups 8 --moe-router-group-topk 4 --moe-token-dispatcher-type alltoall \
  --moe-grouped-gemm --moe-router-score-function sigmoid --mtp-num-layers 1 \
  --tensor-model-parallel-size 2 --pipeline-model-parallel-size 8 \
  --num-virtual-stages-per-pipeline-rank 4 --expert-model-parallel-size 64 --sequence-parallel \
  --pipeline-model-parallel-layout 'Et|(tt|)*30mL' \
  --micro-batch-size 1 --global-batch-size 16384 --bf16 --attention-dropout 0 --hidden-dropout 0 \
  --recompute-granularity selective --recompute-modules mla_up_proj mlp \
  --use-distributed-optimizer --overlap-param-gather --made-up-flag 3
