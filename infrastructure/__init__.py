"""The CDK side: one Stage per environment and its stacks (storage, training, serving, promotion pipeline), built
from the constructs of constructs/. It reads the typed config and every derived fact from core/; nothing in core/
imports it."""
