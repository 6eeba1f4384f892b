"""The training run shared by every backend: checks, setup, resume, the loop, evaluation, checkpoints, final save.

Reads top to bottom like the run itself (nanoGPT's order): everything that can be checked without a GPU or a
process group is checked first, so a bad flag, layout, channel or data file fails in seconds with a message.
"""

from __future__ import annotations

import dataclasses
import os
import random
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from . import checkpoints
from .backends import create_backend
from .backends.base import TrainingBackend
from .data import DataPosition, ShardedBatches, read_blocks, validation_batches
from .errors import ConfigurationError
from .hyperparameters import Hyperparameters, PlatformArguments
from .layout import (
    ParallelLayout,
    check_layout,
    check_model_for_layout,
    check_smp_v1_tensor_parallelism,
    parse_layout,
    read_mp_parameters,
    resolve_backend,
    resolve_precision,
    world_size_from_environment,
)
from .metrics import MetricsHistory, Reporter, train_line, validation_line
from .modeling import (
    ModelSource,
    build_model,
    check_data_fits_model,
    count_parameters,
    load_model_source,
    read_hf_weights,
    save_hf_model,
    weight_decay_groups,
    write_hf_folder,
)
from .perplexity import loss_and_token_sums, perplexity
from .schedule import LearningRateSchedule


@dataclasses.dataclass
class LoopState:
    """Everything about the loop's progress a resume needs, besides model/optimizer/RNG state."""

    step: int = 0
    scheduler_step: int = 0  # optimizer steps actually taken (fp16 overflow skips do not advance the schedule)
    position: DataPosition = dataclasses.field(default_factory=DataPosition)
    history: MetricsHistory = dataclasses.field(default_factory=MetricsHistory)


def _require_path(value: str | None, flag: str, channel: str) -> str:
    if not value:
        raise ConfigurationError(f"missing {flag.lstrip('-').replace('_', ' ')}: pass {flag} or provide {channel}")
    return value


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def run_training(hp: Hyperparameters, platform: PlatformArguments, environ: Mapping[str, str]) -> dict[str, Any]:
    """Check, set up and run one training job; returns the final metrics summary."""
    # --- checks that need no data, model or library ---
    train_dir = _require_path(hp.train_dir, "--train_dir", "the `train` channel (SM_CHANNEL_TRAIN)")
    validation_dir = _require_path(hp.validation_dir, "--validation_dir", "the `test` channel (SM_CHANNEL_TEST)")
    _require_path(hp.output_dir, "--output_dir", "SM_OUTPUT_DATA_DIR")
    if hp.save_final_model:
        _require_path(hp.model_dir, "--model_dir", "SM_MODEL_DIR")
    layout = parse_layout(read_mp_parameters(environ, platform))
    backend_name, fallback_note = resolve_backend(hp.backend, layout)
    check_layout(hp, layout, backend_name, world_size_from_environment(environ))
    precision = resolve_precision(hp, layout, backend_name)

    # --- data, and the model's config and tokenizer (cheap; weights come later) ---
    train_blocks = read_blocks(train_dir, "training")
    validation_blocks = read_blocks(validation_dir, "validation")
    if train_blocks.shape[1] != validation_blocks.shape[1]:
        raise ConfigurationError(
            f"training blocks have {train_blocks.shape[1]} tokens but validation blocks {validation_blocks.shape[1]}: "
            "prepare both with the same --block_size"
        )
    source = load_model_source(hp.pretrained_dir, hp.model_config, hp.tokenizer_dir)
    check_data_fits_model(
        source.config, int(train_blocks.shape[1]), int(max(train_blocks.max(), validation_blocks.max()))
    )
    check_model_for_layout(source.model_type, layout, backend_name)
    import transformers

    check_smp_v1_tensor_parallelism(
        source.model_type, transformers.__version__, layout, backend_name, "installed in this job"
    )
    _prepare_checkpoint_dir(hp)

    if hp.deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # cuBLAS needs it for deterministic GEMMs
        torch.use_deterministic_algorithms(True)

    backend = create_backend(backend_name, hp, layout, precision, environ)
    backend.setup()
    try:
        run = TrainingRun(hp, layout, backend, source, train_blocks, validation_blocks, environ)
        if fallback_note:
            run.reporter.log(f"note: {fallback_note}")
        gpus = int(environ.get("SM_NUM_GPUS", "0") or 0)
        if gpus > backend.local_world_size:
            run.reporter.log(
                f"note: this instance has {gpus} GPUs (SM_NUM_GPUS) but runs {backend.local_world_size} training "
                "process(es) per node; enable the estimator's distribution (mpi for SMP v1, torch_distributed for "
                "SMP v2 or DDP) to use them all"
            )
        return run.execute()
    finally:
        backend.shutdown()


def _prepare_checkpoint_dir(hp: Hyperparameters) -> None:
    if hp.checkpoint_freq == 0:
        return
    try:
        Path(hp.checkpoint_dir).mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigurationError(
            f"cannot create --checkpoint_dir {hp.checkpoint_dir} ({error.strerror}); pass a writable folder, "
            "or --checkpoint_freq 0 to train without checkpoints"
        ) from None


class TrainingRun:
    def __init__(
        self,
        hp: Hyperparameters,
        layout: ParallelLayout,
        backend: TrainingBackend,
        source: ModelSource,
        train_blocks: torch.Tensor,
        validation_blocks: torch.Tensor,
        environ: Mapping[str, str],
    ) -> None:
        self.hp = hp
        self.layout = layout
        self.backend = backend
        self.source = source
        self.train_blocks = train_blocks
        self.validation_blocks = validation_blocks
        self.reporter = Reporter(backend.is_main, hp.progress_bar, dict(environ))
        self.checkpoint_root = Path(hp.checkpoint_dir)
        self.block_size = int(train_blocks.shape[1])

    # --- setup ---
    def _check_validation_share(self) -> None:
        backend, hp = self.backend, self.hp
        needed = backend.data_size * (hp.val_batch_size if backend.requires_full_batches else 1)
        if self.validation_blocks.shape[0] < needed:
            raise ConfigurationError(
                f"the validation data has {self.validation_blocks.shape[0]} blocks but needs at least {needed} "
                f"(data-parallel size {backend.data_size}"
                + (f" x val_batch_size {hp.val_batch_size})" if backend.requires_full_batches else ")")
                + "; add validation data or lower --val_batch_size"
            )

    def _make_optimizer(self, module: torch.nn.Module) -> torch.optim.Optimizer:
        hp = self.hp
        return torch.optim.AdamW(
            weight_decay_groups(module, hp.weight_decay), lr=hp.lr, betas=(hp.beta1, hp.beta2), eps=hp.adam_epsilon
        )

    def execute(self) -> dict[str, Any]:
        hp, backend = self.hp, self.backend
        self._check_validation_share()
        batches = ShardedBatches(
            int(self.train_blocks.shape[0]), hp.train_batch_size, backend.data_rank, backend.data_size, hp.seed
        )
        schedule = LearningRateSchedule.create(
            peak_lr=hp.lr,
            min_lr=hp.min_lr,
            warmup_fraction=hp.warmup,
            decay_steps=hp.lr_decay_iters or hp.max_steps,
            style=hp.lr_decay_style,
        )

        # --- model and optimizer ---
        seed_everything(hp.seed)
        source = self.source
        model = backend.create_model(
            lambda dtype, load_weights=True, **options: build_model(source, dtype, load_weights, **options)
        )
        num_parameters = count_parameters(model)
        trainable = sum(parameter.numel() for parameter in model.parameters() if parameter.requires_grad)
        model, optimizer = backend.prepare(model, self._make_optimizer)

        # --- resume, or start from the pretrained weights and the seed ---
        if backend.is_local_main:
            checkpoints.remove_temporary_dirs(self.checkpoint_root)  # leftovers of a crash mid-write
        backend.barrier()
        state = self._resume(model, optimizer) if hp.resume else None
        if state is None:
            if source.pretrained_dir:
                pretrained_dir = source.pretrained_dir
                backend.load_pretrained(model, lambda: read_hf_weights(pretrained_dir))
            state = LoopState()
            seed_everything(hp.seed)

        # --- the step math ---
        tokens_per_step = hp.train_batch_size * backend.data_size * hp.gradient_accumulation * self.block_size
        banner = {
            **backend.describe(),
            "train_batch_size": hp.train_batch_size,
            "gradient_accumulation": hp.gradient_accumulation,
            "global_batch_size": hp.train_batch_size * backend.data_size * hp.gradient_accumulation,
            "block_size": self.block_size,
            "tokens_per_step": tokens_per_step,
            "train_blocks": int(self.train_blocks.shape[0]),
            "validation_blocks": int(self.validation_blocks.shape[0]),
            "steps_per_epoch": batches.batches_per_epoch // hp.gradient_accumulation,
            "max_steps": hp.max_steps,
            "start_step": state.step,
            "parameters": num_parameters,
            "trainable_parameters": trainable,
            "method": hp.method,
            "model_type": source.model_type,
        }
        self.reporter.log("training: " + " ".join(f"{key}={value}" for key, value in banner.items()))

        # --- the loop: micro-steps, lr, clip + step, log, evaluate, checkpoint ---
        model.train()
        self.reporter.start(total=hp.max_steps, initial=state.step)
        # Throughput counts the time inside training steps only: not logging, validation or checkpoints.
        window_time, window_steps = 0.0, 0
        last_validated = -1
        while state.step < hp.max_steps:
            backend.synchronize()
            step_start = time.perf_counter()
            loss_sum = torch.zeros((), device=backend.device)
            for micro_step in range(hp.gradient_accumulation):
                input_ids = self.train_blocks[batches.indices(state.position)]
                loss_sum += backend.train_micro_step(model, input_ids, micro_step == hp.gradient_accumulation - 1)
                state.position = batches.advance(state.position)
            # Set just before the update: SMP v1 loads a resumed optimizer state (its saved lr too) at the first step.
            learning_rate = schedule.at(state.scheduler_step)
            for group in optimizer.param_groups:
                group["lr"] = learning_rate
            grad_norm, stepped = backend.optimizer_step(model, optimizer)
            backend.synchronize()
            window_time += time.perf_counter() - step_start
            state.scheduler_step += int(stepped)
            state.step += 1
            window_steps += 1
            self.reporter.advance()

            if state.step % hp.logging_freq == 0 or state.step == hp.max_steps:
                mean_loss = (
                    float(backend.all_reduce_sum(loss_sum / hp.gradient_accumulation)) / backend.reduce_group_size()
                )
                elapsed = max(window_time, 1e-9)
                record = {
                    "step": state.step,
                    "epoch": state.position.epoch,
                    "loss": mean_loss,
                    "perplexity": perplexity(mean_loss),
                    "lr": learning_rate,
                    "grad_norm": grad_norm,
                    "tokens_per_s": window_steps * tokens_per_step / elapsed,
                    "samples_per_s": window_steps * tokens_per_step / self.block_size / elapsed,
                }
                state.history.train.append(record)
                self.reporter.log(train_line(record))
                window_time, window_steps = 0.0, 0

            if (hp.validation_freq and state.step % hp.validation_freq == 0) or state.step == hp.max_steps:
                self._validate(model, state)
                last_validated = state.step

            if hp.checkpoint_freq and state.step % hp.checkpoint_freq == 0 and state.step < hp.max_steps:
                self._save_checkpoint(model, optimizer, state)
        self.reporter.close()
        if last_validated != state.step:  # resumed at max_steps, or max_steps reached without a new step
            self._validate(model, state)

        # --- results: metrics.json and the final HF model ---
        extra = {"parameters": num_parameters, "backend": backend.name, "tokens_per_step": tokens_per_step}
        if backend.is_main:
            path = state.history.write(str(self.hp.output_dir), extra)
            self.reporter.log(f"metrics written to {path}")
        if hp.save_final_model:
            self._save_final_model(model)
        backend.barrier()
        self.reporter.log(f"training finished: step={state.step}")
        return {**state.history.summary(), **extra}

    # --- evaluation ---
    def _validate(self, model: Any, state: LoopState) -> None:
        backend, hp = self.backend, self.hp
        model.eval()
        loss_sum, tokens = loss_and_token_sums(
            lambda batch: backend.eval_mean_loss(model, batch),
            validation_batches(
                self.validation_blocks,
                hp.val_batch_size,
                backend.data_rank,
                backend.data_size,
                hp.validation_batches,
                backend.requires_full_batches,
            ),
        )
        model.train()
        totals = backend.all_reduce_sum(
            torch.tensor([loss_sum, float(tokens)], dtype=torch.float64, device=backend.device)
        )
        mean_loss = float(totals[0] / totals[1])
        record = {
            "step": state.step,
            "val_loss": mean_loss,
            "val_perplexity": perplexity(mean_loss),
            "tokens": int(totals[1]),
        }
        state.history.validation.append(record)
        self.reporter.log(validation_line(record))

    # --- checkpoints ---
    def _trainer_state(self, state: LoopState) -> dict[str, Any]:
        import transformers

        backend = self.backend
        return {
            "step": state.step,
            "scheduler_step": state.scheduler_step,
            "data_position": state.position.to_dict(),
            "metrics": state.history.to_dict(),
            "num_nodes": backend.num_nodes,
            "world_size": backend.world_size,
            "data_parallel_size": backend.data_size,
            "backend": backend.name,
            "precision": backend.precision,
            "block_size": self.block_size,
            "hyperparameters": dataclasses.asdict(self.hp),
            "mp_parameters": self.layout.parameters,
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        }

    def _save_checkpoint(self, model: Any, optimizer: Any, state: LoopState) -> None:
        """Write into a temp folder, have each node list its files, then rename (see checkpoints.py)."""
        backend, root = self.backend, self.checkpoint_root
        temporary = checkpoints.temporary_dir(root, state.step)
        final = root / checkpoints.checkpoint_name(state.step)
        if backend.is_local_main and final.exists():
            # Left by an earlier attempt and not complete (a complete one would have been resumed from).
            shutil.rmtree(final, ignore_errors=True)
        temporary.mkdir(parents=True, exist_ok=True)
        backend.barrier()
        trainer_state = self._trainer_state(state)
        backend.save_state(temporary, model, optimizer, trainer_state)
        checkpoints.save_rng_state(temporary, backend.rank)
        if backend.is_main:
            checkpoints.write_json_atomic(temporary / checkpoints.TRAINER_STATE_FILE, trainer_state)
        backend.barrier()
        if backend.is_local_main:
            checkpoints.write_manifest(temporary, backend.node_rank)
        backend.barrier()
        if backend.is_local_main:
            checkpoints.finalize(temporary, final)
        backend.barrier()
        if backend.is_main:
            removed = checkpoints.prune(root, self.hp.num_kept_checkpoints)
            note = f" removed={','.join(path.name for path in removed)}" if removed else ""
            self.reporter.log(f"checkpoint saved: step={state.step} path={final}{note}")

    def _resume(self, model: Any, optimizer: Any) -> LoopState | None:
        backend, hp = self.backend, self.hp
        choice = None
        if backend.is_main:
            path, skipped = checkpoints.latest_complete(self.checkpoint_root)
            for note in skipped:
                self.reporter.log(note)
            if path is not None:
                choice = (path.name, checkpoints.read_trainer_state(path))
        choice = backend.broadcast_object(choice)
        if choice is None:
            return None
        name, saved = choice
        for key, current in (
            ("data_parallel_size", backend.data_size),
            ("backend", backend.name),
            ("block_size", self.block_size),
        ):
            if saved.get(key) != current:
                raise ConfigurationError(
                    f"checkpoint {name} in {self.checkpoint_root} was written with {key}={saved.get(key)} but this run "
                    f"has {key}={current}; resume with the same layout, or use a new --checkpoint_dir"
                )
        for key in ("train_batch_size", "gradient_accumulation", "seed"):
            if saved["hyperparameters"].get(key) != getattr(hp, key):
                raise ConfigurationError(
                    f"checkpoint {name} was written with --{key} {saved['hyperparameters'].get(key)} but this run has "
                    f"{getattr(hp, key)}: the data position would not match; keep it, or use a new --checkpoint_dir"
                )
        directory = self.checkpoint_root / name
        backend.load_state(directory, model, optimizer)
        if not checkpoints.load_rng_state(directory, backend.rank):
            self.reporter.log(f"note: {name} has no RNG state for rank {backend.rank}; continuing from the seed")
            seed_everything(hp.seed + backend.rank)
        self.reporter.log(f"resumed from checkpoint {directory} at step {saved['step']}")
        return LoopState(
            step=int(saved["step"]),
            scheduler_step=int(saved["scheduler_step"]),
            position=DataPosition.from_dict(saved["data_position"]),
            history=MetricsHistory.from_dict(saved["metrics"]),
        )

    # --- the final model ---
    def _save_final_model(self, model: Any) -> None:
        backend, hp = self.backend, self.hp
        model_dir = Path(str(self.hp.model_dir))
        state_dict = backend.full_state_dict(model, model_dir / ".full_state")
        if backend.is_main:
            assert state_dict is not None
            module, tokenizer = backend.hf_module(model), self.source.tokenizer
            if hp.method != "full":
                from .backends.lora import base_record, save_adapter

                assert module is not None
                record = base_record(hp, self.source.model_type, backend.precision)
                target, files = save_adapter(module, tokenizer, str(model_dir), record, state_dict)
            elif module is None:
                target, files = write_hf_folder(self.source.config, tokenizer, state_dict, str(model_dir))
            else:
                target, files = save_hf_model(module, tokenizer, state_dict, str(model_dir))
            self.reporter.log(f"model saved: path={target} files={','.join(files)}")
