"""The platform's core: catalogs, config types and loading, sizing, naming, the API-limit rules and the plan's
arithmetic. Nothing here imports the CDK (aws_cdk, constructs, jsii): loading a config is fast, and the CLI, the
generators and the infrastructure all read the same facts from here (tests/core/test_layers.py)."""
