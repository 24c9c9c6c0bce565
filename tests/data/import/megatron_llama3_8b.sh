#!/bin/bash
# Llama 3 8B pre-training on one node of 8 H100s with Megatron-LM: tp 1, pp 1, cp 2, global batch
# 128, micro batch 1, bf16 (NVIDIA-NeMo/Megatron-Bridge 067f987df03b8355b03192d88d70f1709fedf51a,
# src/megatron/bridge/perf_recipes/llama/h100/llama3.py, llama3_8b_pretrain_8gpu_h100_bf16_config).
# Model dimensions: Meta-Llama-3-8B config.json (huggingface.co/meta-llama/Meta-Llama-3-8B).
# Flag names: NVIDIA/Megatron-LM d98e8a64ddf34856e74b24714e3bedb2f5a39553 megatron/training/arguments.py.

export CUDA_DEVICE_MAX_CONNECTIONS=1
GPUS_PER_NODE=8
NUM_NODES=1

MODEL_ARGS=(
    --num-layers 32
    --hidden-size 4096
    --ffn-hidden-size 14336
    --num-attention-heads 32
    --group-query-attention
    --num-query-groups 8
    --kv-channels 128
    --swiglu
    --untie-embeddings-and-output-weights
    --normalization RMSNorm
    --position-embedding-type rope
    --rotary-base 500000
    --disable-bias-linear
    --seq-length 8192
    --max-position-embeddings 8192
    --vocab-size 128256
    --attention-dropout 0.0
    --hidden-dropout 0.0
)

TRAINING_ARGS=(
    --micro-batch-size 1
    --global-batch-size 128
    --train-iters 100
    --lr 3e-4
    --min-lr 3e-5
    --bf16
    --use-distributed-optimizer
    --overlap-grad-reduce
    --overlap-param-gather
)

PARALLEL_ARGS=(
    --tensor-model-parallel-size 1
    --pipeline-model-parallel-size 1
    --context-parallel-size 2
)

torchrun --nproc_per_node $GPUS_PER_NODE --nnodes $NUM_NODES pretrain_gpt.py \
    ${MODEL_ARGS[@]} \
    ${TRAINING_ARGS[@]} \
    ${PARALLEL_ARGS[@]} \
    --mock-data \
    --tokenizer-type NullTokenizer \
    --log-interval 1
