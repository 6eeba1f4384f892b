"""The library behind train.py, prepare_data.py and evaluate.py: one module per job.

hyperparameters  every flag train.py accepts, with defaults and help (the seam with the CDK side)
layout           mp_parameters -> parallel layout, backend choice, layout checks
data             packed-block JSON lines: reading, writing, sharded deterministic batches
modeling         HF config/model/tokenizer loading, layer discovery, optimizer groups, final HF save
schedule         learning-rate warmup and decay
perplexity       token-weighted loss and perplexity, shared by training and evaluation
metrics          `name=value` log lines, the SageMaker metric regexes, metrics.json
checkpoints      atomic checkpoint directories, manifests, keep-last-K, RNG state
loop             the training loop shared by every backend
backends         plain PyTorch (single process / DDP), SMP v1, SMP v2: setup, step, save/load
"""
