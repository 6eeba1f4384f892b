"""What the endpoint configuration tells SageMaker, beside the names (core/naming.py): the variant, where the model's
files land in the container, and the config's words mapped to the API's."""

from __future__ import annotations

VARIANT = "AllTraffic"
# Where SageMaker puts the files of the Model's ModelDataSource before the container starts (S3ModelDataSource: each
# object's key, less the prefix, is its path under /opt/ml/model); DJL serves the model in this folder.
MODEL_DIR = "/opt/ml/model"
ROUTING = {"least_outstanding_requests": "LEAST_OUTSTANDING_REQUESTS", "random": "RANDOM"}
TRAFFIC = {"all_at_once": "ALL_AT_ONCE", "canary": "CANARY", "linear": "LINEAR"}
