"""Code that runs inside the SageMaker containers: data preparation, GPT-J fine-tuning with SMP, evaluation.

The entry points (`train.py`, `prepare_data.py`, `evaluate.py`) run as scripts with this folder as their working
directory, so they import the `finetune` package as a top-level name. From the repository root the same modules are
importable as `training.finetune.*` (for example `training.finetune.hyperparameters`).
"""
