"""Where things live in a stage's buckets.

One home for the S3 layout: the execution roles are scoped to these prefixes, the training pipeline reads and writes
them, and the serving stack points at them. Every prefix ends with '/'.
"""

from __future__ import annotations

# data bucket
RAW_DATA = "raw/"  # what people upload: text to fine-tune on
PREPARED_DATA = "prepared/"  # tokenized, packed blocks written by the prepare step
EVALUATION = "evaluation/"  # evaluation reports of pipeline runs
DATA_CAPTURE = "capture/"  # endpoint requests and responses, when data capture is on; expire by the config

# models bucket
PRETRAINED = "pretrained/"  # Hugging Face weights staged once, so no job depends on a hub at run time
CHECKPOINTS = "checkpoints/"  # training checkpoints, synced by SageMaker from /opt/ml/checkpoints
TRAINED = "trained/"  # fine-tuned weights, uncompressed, one prefix per training job
REGISTERED = "registered/"  # a registered version's copy of its job's weights, one prefix per pipeline run
# a version approved in another stage, copied in by the promotion role: promoted/<source group>/<version>/
PROMOTED = "promoted/"
# what a model package names, so what another stage's promotion reads: a registered copy, or a promoted one (chains)
PACKAGED_WEIGHTS = (REGISTERED, PROMOTED)
# inside a served weights prefix: the inference handler, <weights>inference/<sha256>/ (infrastructure/code_archives.py)
HANDLER_SUBFOLDER = "inference/"
# where served weights prefixes are, each with a HANDLER_SUBFOLDER only the code-packaging function writes
SERVED_WEIGHTS = (PRETRAINED, TRAINED, REGISTERED, PROMOTED)

# artifacts bucket
CODE = "code/"  # content-addressed code archives (training sourcedir, LMI model.tar.gz)

# every versioned bucket: an overwritten or deleted object's old version stays recoverable this many days
NONCURRENT_VERSION_DAYS = 30
