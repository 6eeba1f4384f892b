"""docs/synth-checks.md: every check synth performs, from the rules of core/api_limits/rules.py and the CHECKS
listed here; a test regenerates the page and checks that every test it names exists.

    python -m generators.synth_checks_page > docs/synth-checks.md      (make docs)
"""

from __future__ import annotations

import sys

from core import api_limits

API_TESTS = "tests/core/test_api_limits.py::test_every_rule_refuses_a_value_just_past_its_limit"
TRAINING_TESTS = "tests/core/test_training_config.py"
SERVING_TESTS = "tests/core/test_serving_config.py"
LOADING_TESTS = "tests/core/test_config_loading.py"
PROMOTION_TESTS = "tests/core/test_promotion_config.py::test_refuses_a_promotion_that_cannot_deploy"

# Checks that are not API-member limits: (group, what synth refuses, source of the limit, test).
CHECKS: tuple[tuple[str, str, str, str], ...] = (
    (
        "Regions",
        "a stage region where the pinned SageMaker SDK has no image the stage needs (its SMP version's "
        "training image, each processing instance type's PyTorch image, its engine's LMI image); the message lists the "
        "regions that have them all",
        "the SageMaker SDK's image_uris tables, looked up offline (core/catalog/images.py)",
        "tests/core/test_region_support.py::test_a_region_without_an_image_the_stage_needs_is_refused_with_the_regions_that_work",
    ),
    (
        "Regions",
        "a region that is not an AWS region",
        "the CDK's region facts (aws_cdk.region_info), committed as core/catalog/regions.json",
        "tests/core/test_config.py::test_rejects_invalid_config_naming_file_and_field",
    ),
    (
        "CloudFormation",
        "a stack using a resource type CloudFormation does not offer in its region (for example "
        "AWS::SageMaker::ModelPackageGroup in the China regions), naming the regions that have them all; or a region "
        "whose resource types are not published",
        "cfn-lint's per-region provider schemas, as core/api_limits/cfn_resource_types.json",
        "tests/core/test_region_support.py::test_a_stack_using_a_resource_type_its_region_lacks_fails_synth",
    ),
    (
        "SageMaker CreateProcessingJob",
        "a processing or evaluation instance type the SDK has no PyTorch 1.13.1 image "
        "for (p2: deprecated for PyTorch 1.13)",
        "the SageMaker SDK's image lookup (sagemaker/image_uris.py)",
        f"{TRAINING_TESTS}::test_refuses_what_sagemaker_or_train_py_would_refuse_later",
    ),
    (
        "SMP (smp.init and its modules)",
        "a key set against smp.init's rules (tensor parallelism without ddp, "
        "prescaled_batch without optimize speed, bf16 with fp16)",
        "SMP v1's backend/config.yaml (training/finetune/"
        "layout.py check_smp_v1_requires, run at synth through core/training_job.py)",
        f"{TRAINING_TESTS}::test_rejects_layouts_that_cannot_run",
    ),
    (
        "SMP (smp.init and its modules)",
        "tensor x pipeline parallel degrees that do not divide the processes; more processes than GPUs; batches "
        "not divisible by microbatches; sharded data parallelism with SMP v1; p5 with SMP v1; delayed parameter "
        "initialization over pretrained weights; SMP v2 tensor parallelism for GPT-J, pipeline parallelism or fp16",
        "training/finetune/layout.py check_layout and the SMP documentation",
        f"{TRAINING_TESTS}::test_rejects_layouts_that_cannot_run",
    ),
    (
        "SMP (smp.init and its modules)",
        "a tensor-parallel degree that divides neither the attention heads nor the hidden size",
        "SMP's tensor-parallelism reference: modules whose dimensions the degree does not divide are not distributed",
        f"{TRAINING_TESTS}::test_refuses_what_sagemaker_or_train_py_would_refuse_later",
    ),
    (
        "SMP (smp.init and its modules)",
        "with prescaled_batch, a sequence length that is not a multiple of the tensor-parallel degree",
        "SMP v1 shard_sequence (InvalidSeqLenPrescaledBatchError)",
        f"{TRAINING_TESTS}::test_refuses_what_sagemaker_or_train_py_would_refuse_later",
    ),
    (
        "SMP (smp.init and its modules)",
        "SMP v1 tensor parallelism with a transformers pin SMP does not replace, "
        "a model type it does not translate, or optimize memory",
        "SMP v1's predefined_hooks.py and GPT-J translation",
        f"{TRAINING_TESTS}::test_synth_refuses_smp_v1_tensor_parallelism_with_an_unsupported_transformers_pin",
    ),
    (
        "train.py start-up",
        "flags train.py's parser or its checks refuse (train.py run at synth on the stage's flags and mp_parameters)",
        "training/finetune/hyperparameters.py, training/finetune/layout.py",
        f"{TRAINING_TESTS}::test_rejects_layouts_that_cannot_run",
    ),
    (
        "LMI handler start-up",
        "int8 without a pre-sharded DeepSpeed checkpoint; int8 with vLLM; a checkpoint served "
        "with another dtype, degree or engine; max_new_tokens filling the context",
        "DeepSpeed's loading of pre-sharded checkpoints (microsoft/DeepSpeed@v0.12.6 module_inject/load_checkpoint.py)",
        f"{SERVING_TESTS}::test_rejects_endpoints_that_cannot_work",
    ),
    (
        "LMI handler start-up",
        "a tensor-parallel degree that does not divide the GPUs or the attention heads",
        "DeepSpeed and vLLM tensor parallelism",
        f"{SERVING_TESTS}::test_rejects_tensor_parallel_degree_not_dividing_the_heads",
    ),
    (
        "Sizing",
        "training that does not fit the GPUs' memory, or whose processes cannot load the model in host memory",
        "core/sizing.py",
        "tests/core/test_training_config.py::test_every_training_process_loading_the_whole_model_must_fit_host_memory",
    ),
    (
        "Sizing",
        "an endpoint whose weights and KV cache do not fit the GPUs, or whose ranks cannot load the model in "
        "host memory (with the cheapest setup that fits)",
        "core/sizing.py",
        f"{SERVING_TESTS}::test_rejects_endpoints_that_cannot_work",
    ),
    (
        "S3",
        "a weights location or pipeline source bucket that is not an S3 bucket name (3-63 lowercase letters, "
        "digits, dots and hyphens)",
        "S3 bucket naming rules",
        f"{SERVING_TESTS}::test_rejects_endpoints_that_cannot_work",
    ),
    (
        "SageMaker CreateEndpointConfig",
        "a volume size or KMS key on an instance type with local NVMe storage",
        "the SageMaker SDK's volume_size_supported rule",
        f"{SERVING_TESTS}::test_rejects_endpoints_that_cannot_work",
    ),
    (
        "The config file (YAML)",
        "a key given twice in one mapping, at any level of the config or an overlay (both lines named)",
        "YAML 1.2.2 §3.2.1.1 (keys are unique); PyYAML would keep the last one silently",
        f"{LOADING_TESTS}::test_refuses_what_yaml_or_coercion_would_let_through",
    ),
    (
        "The config file (YAML)",
        "aliases expanding past 10,000 values, an alias inside itself, nesting past 32 levels, files over 256 KiB, "
        "tags other than YAML's core types",
        "billion-laughs expansion; the project's limits on a config file",
        f"{LOADING_TESTS}::test_refuses_what_yaml_or_coercion_would_let_through",
    ),
    (
        "The config file (YAML)",
        "plain values YAML 1.1 reads differently from YAML 1.2 (yes/on/off, 0777, 1:30, 1_000, dates) and numbers "
        "with a leading zero",
        "YAML 1.2.2 §10.3 core schema, against the YAML 1.1 types PyYAML resolves",
        f"{LOADING_TESTS}::test_refuses_what_yaml_or_coercion_would_let_through",
    ),
    (
        "The config file (YAML)",
        "a directory, an unreadable, binary, non-UTF-8 or empty file, or a top level that is not a mapping, as the "
        "config or an overlay",
        "the operating system and UTF-8",
        f"{LOADING_TESTS}::test_a_file_that_is_not_a_config_is_named_with_one_clear_error",
    ),
    (
        "Config types",
        'any coercion: true, 2.0 or "8" for a whole number; text for a number or boolean; a number for text; '
        "infinite or NaN numbers",
        "pydantic strict mode (the config's models, validated as the file was written)",
        f"{LOADING_TESTS}::test_refuses_what_yaml_or_coercion_would_let_through",
    ),
    (
        "Config types",
        "pipeline.approval_before or smoke_test_after naming a stage the file does not have (their defaults follow "
        "the file's own stages)",
        "the promotion pipeline's stages",
        f"{LOADING_TESTS}::test_pipeline_gates_default_to_the_files_own_stages",
    ),
    (
        "CloudFormation",
        "more than 50 tags on a stage's resources (the project's, the file's and the stage's together)",
        "CloudFormation resource schemas (Tags maxItems 50); AWS tagging: at most 50 user tags per resource",
        f"{LOADING_TESTS}::test_refuses_what_yaml_or_coercion_would_let_through",
    ),
    (
        "CloudFormation",
        "any error in the CDK's validation report (cdk.out/validation-report.json), which `cdk synth` alone "
        "would let pass with exit status 0",
        "aws-cdk-lib 2.275.0 synthesis validation; the CLI sets failSynthOnValidationErrors=false",
        "tests/test_app.py::test_an_error_in_the_cdk_validation_report_fails_cdk_synth",
    ),
    (
        "S3",
        "data_capture_expiry_days outside 1-365 (a lifecycle expiry needs a positive number of days; a year is the "
        "project's cap on keeping prompts and responses)",
        "S3 PutBucketLifecycleConfiguration (LifecycleExpiration.Days)",
        "tests/infrastructure/test_storage_stack.py::test_captured_data_expiry_outside_1_to_365_days_is_refused",
    ),
    (
        "Hugging Face Hub",
        "a weights or pretrained revision that is not a full 40-hex commit (a branch, tag, refs/pr/<n> or short "
        "commit names files that can change)",
        "the Hub's git revisions: only a commit names fixed files",
        "tests/infrastructure/test_training_pipeline.py::test_training_pins_only_full_commits",
    ),
    (
        "Hugging Face Hub",
        "a pre-sharded DeepSpeed checkpoint (pickled .pt files) without weights.allow_pickle: true",
        "torch.load of pickles runs code; DeepSpeed checkpoints are torch.save files",
        "tests/infrastructure/test_serving_stack.py::test_a_presharded_checkpoint_is_served_only_when_the_config_accepts_its_pickles",
    ),
    (
        "pip (hash-checking mode)",
        "a training/requirements.txt that pip would install unhashed: no --require-hashes or --only-binary line, a "
        "requirement without an exact pin or sha256 hashes, -r/-c/-e lines",
        "pip's hash-checking mode, as the SageMaker training toolkit runs it (pip install -r requirements.txt)",
        "tests/infrastructure/test_code_archives.py::test_synth_refuses_training_requirements_pip_would_install_unhashed",
    ),
    *(
        ("Promotion between stages", what, source, PROMOTION_TESTS)
        for what, source in (
            (
                "weights source promoted from a stage the file does not have, from the stage itself, or from a later "
                "stage",
                "stages deploy in the file's order: the source's grants and versions must exist first",
            ),
            (
                "a promotion between a stage with an account and one without",
                "the source grants the promoting stage's role by its account",
            ),
            (
                "a promotion across partitions (aws, aws-cn, aws-us-gov)",
                "IAM principals of one partition cannot be granted another's resources",
            ),
            (
                "a promoted site whose source stage's fine-tuning makes the other kind of version (whole models for an "
                "adapter, adapters for whole weights) or another model than the one served",
                "what the source's model package group holds (core/config/promotion.py origin)",
            ),
            (
                "a promotion into a region without the serving image the source's versions were registered for",
                "the SageMaker SDK's image_uris tables (core/catalog/images.py)",
            ),
        )
    ),
)

HEADER = """# Checks synth performs

`make synth` promises that the job cannot refuse what synth accepted: whatever an AWS API, SageMaker's containers
or `train.py` would refuse later is refused when the config loads (or, for what depends on the whole app, when it
synthesizes), with the config field named. This page lists those checks, grouped by the API or tool whose limit each
enforces. It is generated by `python -m generators.synth_checks_page > docs/synth-checks.md` from the rules of
`core/api_limits/rules.py` (field to API member, with the limits read from botocore's service models and
CloudFormation's schemas: `core/api_limits/aws_tables.py`) and the other checks listed in
`generators/synth_checks_page.py`; a test fails when it is out of date or names a test that does not exist.
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def rows() -> dict[str, list[tuple[str, str, str]]]:
    """group -> (what synth refuses, source, test)."""
    groups: dict[str, list[tuple[str, str, str]]] = {}
    for rule in api_limits.RULES:
        for member, refused, source in rule.limit_texts():
            field = {"training": "training.", "serving": "serving."}.get(rule.scope, "") + rule.field
            what = f"`{field}`" + (f" as {member}" if member else "") + f": {refused}"
            groups.setdefault(rule.api, []).append((what, source, API_TESTS))
    for group, what, source, test in CHECKS:
        groups.setdefault(group, []).append((what, source, test))
    return groups


# The order of the page: the calls in the order a stage makes them, then the tools and the platform's own rules.
GROUP_ORDER = (
    "The config file (YAML)",
    "Config types",
    "SageMaker CreateTrainingJob",
    "SageMaker CreateProcessingJob",
    "SageMaker CreateModelPackage",
    "SageMaker CreateModel",
    "SageMaker CreateEndpointConfig",
    "SageMaker CreateEndpoint",
    "SageMaker CreateModelPackageGroup",
    "SageMaker CreatePipeline",
    "SageMaker ListModelPackages",
    "SageMaker DescribeModelPackage",
    "Application Auto Scaling PutScalingPolicy",
    "Application Auto Scaling RegisterScalableTarget",
    "IAM CreateRole",
    "CodePipeline CreatePipeline",
    "S3",
    "CloudFormation",
    "Regions",
    "Promotion between stages",
    "Hugging Face Hub",
    "pip (hash-checking mode)",
    "SMP (smp.init and its modules)",
    "train.py start-up",
    "LMI handler start-up",
    "Sizing",
)


def render() -> str:
    lines = [HEADER]
    groups = rows()
    order = {group: index for index, group in enumerate(GROUP_ORDER)}
    for group in sorted(groups, key=lambda g: (order.get(g, len(order)), g)):
        lines += [f"## {group}", "", "| what synth refuses | source of the limit | test |", "|---|---|---|"]
        lines += [f"| {_cell(what)} | {_cell(source)} | `{test}` |" for what, source, test in groups[group]]
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.stdout.write(render())
