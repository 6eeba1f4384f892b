"""Run the pieces that execute inside SageMaker on this machine: tiny models, the local endpoint, the training step."""
