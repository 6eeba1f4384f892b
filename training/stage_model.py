"""Copy one Hugging Face repository, at one exact commit, into the models bucket: the staging pipeline's step.

    python stage_model.py --model_id EleutherAI/gpt-j-6b --revision main \\
        --destination s3://<models bucket>/pretrained/gpt-j-6b/ --region us-east-1
    python stage_model.py --model_id microsoft/bloom-deepspeed-inference-int8 \\
        --revision aa00a6626f6484a2eef68e06d1e089e4e32aa571 --allow_pickle --deepspeed_tp_size 8 \\
        --deepspeed_dtype int8 --destination s3://<models bucket>/pretrained/bloom-176b-deepspeed-int8-tp8/ ...

What it writes under the destination prefix, in this order:

    <commit>/...      the files, all from exactly that commit, each checked against the hub's own hash first
    <commit>/.staged-sha256.json   every file's sha256 (finetune/staged.py), for the readers to check what they load
    <commit>.json     the commit's record (with the same sha256s), once every file is there
    main.json         only when following a branch (--revision main): the same record, naming the commit main had

The revision is resolved to its commit first, and the download asks for that commit, so a push to the branch
meanwhile changes nothing; a pinned commit the hub resolves to anything else is refused, and so is any ref the hub
lets anyone create (refs/pr/<n> serves a pull request's files). Readers read a record first (the endpoint when its
stack deploys, the training pipeline when it runs) and then only that commit's prefix: a staging that stopped half-way
has no record and is never read, and staging another commit never touches the files of one already served. A commit
whose record exists is not downloaded again.

Every downloaded file is checked against the hub's metadata of that commit (model_info(files_metadata=True)): an LFS
file's bytes against its sha256 (siblings[].lfs.sha256), a small file's against its git blob id (siblings[].blob_id,
the sha1 of `git hash-object`). A file that differs, or that the metadata does not describe, fails the job before
anything is uploaded. The sha256 of each file then goes into the manifest inside the staged folder and into the record:
the training jobs and the endpoint check the pickles they load against it (finetune/staged.py, lmi_folder_check.py).

Only what loading needs is copied: the configs, the tokenizer files and safetensors weights, never the Flax,
TensorFlow or ONNX copies. PyTorch pickles (pytorch_model*.bin, a DeepSpeed checkpoint's .pt shards) can run code when
they are loaded: they are copied only with --allow_pickle (the config's allow_pickle), and then only when the
repository has no safetensors.

With --deepspeed_tp_size/--deepspeed_dtype the repository is a pre-sharded DeepSpeed inference checkpoint: its
ds_inference_config.json must describe exactly that split and dtype in the form DeepSpeed's kernel-injection loader
reads, and every file it lists is copied (a listed file the repository lacks fails the staging, not the endpoint's
start-up 40 minutes later).

A gated repository (Llama, Mistral) answers only requests with the token of an account its owner let in. With
--hf_token_secret the job reads that token from the Secrets Manager secret of that name (the stage's, readable only by
the staging role) and hands it to the hub client's calls: it is never an argument, an environment variable or a line
of the job's log.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import re
import shutil
import sys
from pathlib import Path
from typing import NamedTuple

from finetune.compatibility import REMEDY, Version, folder_problems, parse_readers
from finetune.staged import MANIFEST, PICKLE_SUFFIXES, git_blob_sha1, manifest, sha256_file
from huggingface_hub.utils import filter_repo_objects

CONFIG_PATTERNS = ["*.json", "*.txt", "*.model", "*.tiktoken"]  # configs, tokenizer, vocab and merges
SAFETENSORS = "*.safetensors"
PYTORCH_BIN = "pytorch_model*.bin"
# The handler loads a folder through DeepSpeed's checkpoint description whenever it holds this file.
DS_DESCRIPTION = "ds_inference_config.json"
# DeepSpeed's dtype names in the description (torch's) -> the platform's.
DS_DTYPES = {"int8": "int8", "float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}
# deepspeed@v0.12.6:deepspeed/module_inject/replace_module.py, get_sd_loader_json: only these types come back as the
# description the kernel-injection loader reads; any other builds a Megatron loader.
DS_TYPES = ("bloom", "ds_model")
COMMIT = re.compile(r"[0-9a-f]{40}")
# A branch or tag name without '/': never refs/pr/<n> (anyone may open a pull request on the hub) or refs/convert/*.
BRANCH = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
PIPELINE_HINT = "serving.weights or training.pretrained in the stage config"
TOKEN_HINT = "stages.<stage>.huggingface_token_secret in the stage config"


class StagingError(Exception):
    """The repository does not hold what the catalog and the config expect, or the bucket holds something else."""


class Keys(NamedTuple):
    """Where one commit goes under a destination prefix (the stacks read the same keys: StagedWeights)."""

    files: str  # <prefix><commit>/
    record: str  # <prefix><commit>.json
    pointer: str | None  # <prefix><branch>.json when following a branch, else None

    @classmethod
    def of(cls, prefix: str, commit: str, revision: str) -> Keys:
        pointer = None if revision == commit else f"{prefix}{revision}.json"
        return cls(f"{prefix}{commit}/", f"{prefix}{commit}.json", pointer)


# --- which commit and which files --------------------------------------------------------------------------------


def read_token(secrets, secret_id: str) -> str:
    """The Hugging Face token in the secret `secret_id` (its current value), or a StagingError that says how to put
    one there. The token itself is never part of a message."""
    from botocore.exceptions import ClientError

    try:
        value = secrets.get_secret_value(SecretId=secret_id)
    except ClientError as error:
        code = error.response.get("Error", {}).get("Code", "")
        if code == "ResourceNotFoundException":
            raise StagingError(
                f"the secret {secret_id} holds no Hugging Face token yet (or does not exist): put one with `aws "
                f"secretsmanager put-secret-value --secret-id {secret_id} --secret-string <token>` (a read token of an "
                "account the repository's owner granted access)"
            ) from None
        raise StagingError(f"cannot read the secret {secret_id} ({code}): {error}") from None
    token = (value.get("SecretString") or "").strip()
    if not token:
        raise StagingError(f"the secret {secret_id} is empty: put a Hugging Face read token in it")
    return token


def resolve(hub, model_id: str, revision: str, token: str | None = None, token_source: str | None = None) -> str:
    """The commit `revision` names on the hub: a full commit only if the hub has exactly it; a branch's head."""
    from huggingface_hub.errors import GatedRepoError

    abbreviated = re.fullmatch(r"[0-9a-f]{4,39}", revision)
    if not (COMMIT.fullmatch(revision) or BRANCH.fullmatch(revision)) or abbreviated:
        raise StagingError(
            f"revision {revision!r} of {model_id} is neither a full 40-hex commit nor a branch name: refs such as "
            "refs/pr/<n> serve files anyone can push, and a short commit could match another one"
        )
    try:
        commit = hub.model_info(model_id, revision=revision, token=token).sha
    except GatedRepoError:
        if token is None:
            raise StagingError(
                f"{model_id} is gated on the Hugging Face Hub and the job was given no token: set {TOKEN_HINT}, and "
                "put a token of an account with access in that secret"
            ) from None
        raise StagingError(
            f"{model_id} is gated on the Hugging Face Hub and the token in {token_source} has no access to it: "
            f"accept the model's terms on huggingface.co/{model_id} with the account the token belongs to"
        ) from None
    if not commit or not COMMIT.fullmatch(commit):
        raise StagingError(f"the hub named no commit for {model_id}@{revision} (got {commit!r})")
    if COMMIT.fullmatch(revision) and commit != revision:
        raise StagingError(
            f"{model_id}@{revision} resolves to commit {commit}: refusing to stage anything but the pinned commit"
        )
    return commit


def weight_patterns(repo_files: list[str], *, allow_pickle: bool, where: str) -> list[str]:
    """The one weights format to copy: safetensors if present, else (only when allowed) PyTorch .bin pickles."""
    if any(filter_repo_objects(repo_files, allow_patterns=[SAFETENSORS])):
        return [SAFETENSORS]
    pickles = sorted(filter_repo_objects(repo_files, allow_patterns=[PYTORCH_BIN]))
    if not pickles:
        raise StagingError(f"{where} has neither *.safetensors nor pytorch_model*.bin weights")
    if not allow_pickle:
        raise StagingError(
            f"{where} has no *.safetensors weights, only PyTorch pickles ({', '.join(pickles[:3])}"
            f"{', ...' if len(pickles) > 3 else ''}), which can run code when they are loaded: pin a revision that "
            f"has safetensors, or accept these pickles with allow_pickle: true ({PIPELINE_HINT})"
        )
    return [PYTORCH_BIN]


def deepspeed_files(description: dict, repo_files: list[str], *, tp_size: int, dtype: str) -> list[str]:
    """The files a DeepSpeed checkpoint description lists, once it is known to be what the catalog says: split for
    `tp_size` ranks, in `dtype`, loadable from the staged folder. Read as DeepSpeed 0.12.6 reads it
    (deepspeed/module_inject/replace_module.py, replace_transformer_layer)."""
    where = DS_DESCRIPTION
    kind = str(description.get("type", ""))
    if kind.lower() not in DS_TYPES:
        raise StagingError(f"{where} has type {kind!r}; DeepSpeed reads tensor-parallel shards only for {DS_TYPES}")
    if "version" not in description:
        raise StagingError(f"{where} has no version; DeepSpeed's loader requires one")
    if "base_dir" in description:
        raise StagingError(
            f"{where} sets base_dir {description['base_dir']!r}: DeepSpeed would read the shards from there instead "
            "of the staged folder; use a repository whose description has no base_dir"
        )
    if description.get("parallelization", "pp") != "tp":
        raise StagingError(
            f"{where} has parallelization {description.get('parallelization', 'pp')!r}: every rank would load every "
            "file; a pre-sharded checkpoint has 'tp'"
        )
    checkpoints = description.get("checkpoints")
    if not isinstance(checkpoints, dict) or not checkpoints.get("tp"):
        raise StagingError(f"{where} lists no tensor-parallel files (checkpoints.tp)")
    tp_files, non_tp = list(checkpoints["tp"]), list(checkpoints.get("non_tp", []))
    # As DeepSpeed resolves it: mp_size over tp_size over the number of tp files.
    size = description.get("mp_size", description.get("tp_size", len(tp_files)))
    if size != tp_size:
        raise StagingError(f"{where} is split for {size} tensor-parallel ranks, not {tp_size}")
    if len(tp_files) % tp_size:
        raise StagingError(f"{where}: its {len(tp_files)} tensor-parallel files do not divide into {tp_size} ranks")
    stored = description.get("dtype")
    if stored is None:
        raise StagingError(f"{where} states no dtype: cannot confirm it holds {dtype} weights")
    if DS_DTYPES.get(stored) != dtype:
        raise StagingError(f"{where} holds {stored} weights, not {dtype}")
    listed = tp_files + non_tp
    missing = sorted(set(listed) - set(repo_files))
    if missing:
        shown = ", ".join(missing[:5]) + (", ..." if len(missing) > 5 else "")
        raise StagingError(f"{where} lists {len(missing)} file(s) the repository does not have: {shown}")
    return listed


def check_readable(folder: Path, where: str, readers: dict[str, Version]) -> None:
    """Refuse what a job or endpoint of the stage cannot read (finetune/compatibility.py), before anything reaches
    the bucket: e.g. a config.json written by transformers 5.x, which the SMP v2 jobs' 4.46.3 reads without an error
    but with the default RoPE, or tokenizer files 5.x wrote. `readers`: the oldest version of each library that
    reads the repository in this stage (synth computes them from the training image and the serving engine)."""
    problems = folder_problems(folder, readers, holder="the oldest job or endpoint of this stage that reads it has")
    if problems:
        raise StagingError(f"{where}: this stage cannot read it: {'; '.join(problems)}; {REMEDY}")


def is_pickle(name: str) -> bool:
    return name.lower().endswith(PICKLE_SUFFIXES)


def stage(
    model_id: str,
    revision: str,
    output_dir: Path,
    hub=None,
    deepspeed: tuple[int, str] | None = None,
    allow_pickle: bool = False,
    token: str | None = None,
    readers: dict[str, Version] | None = None,
) -> list[Path]:
    """Download what loading the model needs, at `revision` (a commit, as run() passes it), into `output_dir`; return
    the files, biggest first. `deepspeed`: (tensor parallel degree, dtype) of the pre-sharded DeepSpeed checkpoint the
    repository must be. `token`: for a gated repository. `readers`: the library versions that must read the folder
    (check_readable). Everything is checked before anything is uploaded."""
    if hub is None:
        import huggingface_hub as hub
    where = f"{model_id}@{revision}"
    files = hub.list_repo_files(model_id, revision=revision, token=token)
    if "config.json" not in files:
        raise StagingError(f"{where} has no config.json at its top level; is it a model repository?")
    # The manifest is the staging's own, written after the download: never a file of the repository.
    ignore: list[str] = [MANIFEST]
    if deepspeed is None:
        # A description copied without its shards would send the handler after files that are not there.
        patterns = CONFIG_PATTERNS + weight_patterns(files, allow_pickle=allow_pickle, where=where)
        ignore.append(DS_DESCRIPTION)
    else:
        if DS_DESCRIPTION not in files:
            raise StagingError(
                f"{where} has no {DS_DESCRIPTION} at its top level: it is not a pre-sharded DeepSpeed inference "
                "checkpoint"
            )
        path = hub.hf_hub_download(model_id, DS_DESCRIPTION, revision=revision, local_dir=str(output_dir), token=token)
        description = json.loads(Path(path).read_text())
        tp_size, dtype = deepspeed
        listed = deepspeed_files(description, files, tp_size=tp_size, dtype=dtype)
        pickled = [name for name in listed if is_pickle(name)]
        if pickled and not allow_pickle:
            raise StagingError(
                f"{where}: {DS_DESCRIPTION} lists {len(pickled)} PyTorch pickle file(s) ({', '.join(pickled[:3])}, "
                "...), which can run code when they are loaded: DeepSpeed's pre-sharded checkpoints are torch.save "
                f"files; accept them with allow_pickle: true ({PIPELINE_HINT})"
            )
        patterns = CONFIG_PATTERNS + [glob.escape(name) for name in listed]
    print(f"stage_model: {where}: copying {', '.join(patterns[:6])}{' ...' * (len(patterns) > 6)}", flush=True)
    hub.snapshot_download(
        model_id,
        revision=revision,
        local_dir=str(output_dir),
        allow_patterns=patterns,
        ignore_patterns=ignore,
        token=token,
    )
    # The hub client keeps download metadata in <local_dir>/.cache; it is not part of the model.
    shutil.rmtree(output_dir / ".cache", ignore_errors=True)
    if deepspeed is not None:
        absent = [name for name in listed if not (output_dir / name).is_file()]
        if absent:
            raise StagingError(f"the download lacks {len(absent)} file(s) {DS_DESCRIPTION} lists: {absent[:5]}")
    if readers:
        check_readable(output_dir, where, readers)
    staged = sorted((p for p in output_dir.rglob("*") if p.is_file()), key=lambda p: -p.stat().st_size)
    unexpected = [p.name for p in staged if is_pickle(p.name)] if not allow_pickle else []
    if unexpected:  # the patterns above never ask for one; a net under them
        raise StagingError(f"the download holds PyTorch pickles although they are not allowed: {unexpected[:5]}")
    total = sum(p.stat().st_size for p in staged)
    print(f"stage_model: {len(staged)} files, {total / 2**30:.2f} GiB in {output_dir}", flush=True)
    return staged


def hub_hashes(hub, model_id: str, commit: str, token: str | None = None) -> dict[str, tuple[str, str]]:
    """What the hub says each file of `commit` is: path -> ("sha256", hex) for an LFS file (siblings[].lfs.sha256),
    ("git-sha1", hex) for a file git stores itself (siblings[].blob_id, its git object id). huggingface_hub's
    ModelInfo/RepoSibling/BlobLfsInfo, filled only with files_metadata=True."""
    info = hub.model_info(model_id, revision=commit, files_metadata=True, token=token)
    if info.sha != commit:
        raise StagingError(f"the hub's file metadata of {model_id}@{commit} is of commit {info.sha}")
    hashes = {}
    for sibling in info.siblings or []:
        lfs = sibling.lfs
        sha256 = lfs.get("sha256") if isinstance(lfs, dict) else getattr(lfs, "sha256", None)
        if sha256:
            hashes[sibling.rfilename] = ("sha256", sha256)
        elif sibling.blob_id:
            hashes[sibling.rfilename] = ("git-sha1", sibling.blob_id)
    return hashes


def check_hashes(output_dir: Path, files: list[Path], expected: dict[str, tuple[str, str]], where: str) -> dict:
    """The sha256 of each downloaded file, once its bytes are the ones the hub describes; a StagingError naming the
    first that differs or that the hub does not describe (nothing is uploaded then)."""
    hashes = {}
    for path in sorted(files):
        name = path.relative_to(output_dir).as_posix()
        if name not in expected:
            raise StagingError(f"{where}: the hub's file metadata has no hash of {name}: cannot check the download")
        kind, value = expected[name]
        sha256 = sha256_file(path)
        actual = sha256 if kind == "sha256" else git_blob_sha1(path)
        if actual != value.lower():
            raise StagingError(
                f"{where}: the downloaded {name} has {kind} {actual}, but the hub records {value} for that commit: "
                "the download was altered or damaged; nothing was uploaded, run the staging again"
            )
        hashes[name] = sha256
    return hashes


# --- into the models bucket --------------------------------------------------------------------------------------


def parse_destination(destination: str) -> tuple[str, str]:
    match = re.fullmatch(r"s3://([a-z0-9][a-z0-9.\-]{1,61}[a-z0-9])/((?:[^/]+/)+)", destination)
    if not match:
        raise ValueError(f"--destination {destination!r} is not s3://<bucket>/<prefix>/ (a prefix ends with '/')")
    return match.group(1), match.group(2)


def read_record(s3, bucket: str, key: str) -> dict | None:
    """The record at `key`, or None. Listed first: a role that may list the prefix but finds no object gets no 403."""
    listed = s3.list_objects_v2(Bucket=bucket, Prefix=key, MaxKeys=1).get("Contents", [])
    if not listed or listed[0]["Key"] != key:
        return None
    return json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())


def write_record(s3, bucket: str, key: str, record: dict) -> None:
    # The commit also goes into the object's metadata: CloudFormation reads it with HeadObject at deploy time (it
    # cannot parse JSON); the training pipeline reads the body (JsonGet).
    s3.put_object(
        Bucket=bucket,
        Key=key,
        Body=json.dumps(record, indent=2, sort_keys=True).encode(),
        ContentType="application/json",
        Metadata={"commit": record["commit"], "weights": record["weights"]},
    )


def check_record(record: dict, *, model_id: str, commit: str, allow_pickle: bool, where: str) -> None:
    if (record.get("model_id"), record.get("commit")) != (model_id, commit):
        raise StagingError(
            f"{where} holds the record of {record.get('model_id')}@{record.get('commit')}, not {model_id}@{commit}: "
            "refusing to overwrite another repository's staging"
        )
    if record.get("weights") != "safetensors" and not allow_pickle:
        raise StagingError(
            f"{where}: {model_id}@{commit} was staged with PyTorch pickle weights, which are not allowed now; set "
            f"allow_pickle: true ({PIPELINE_HINT}) or pin a revision with safetensors"
        )


def run(
    model_id: str,
    revision: str,
    destination: str,
    output_dir: Path,
    *,
    hub,
    s3,
    deepspeed: tuple[int, str] | None = None,
    allow_pickle: bool = False,
    token: str | None = None,
    token_source: str | None = None,
    readers: dict[str, Version] | None = None,
) -> dict:
    """Stage `model_id` at the commit `revision` names into `destination` (s3://bucket/prefix/); return its record.
    `token` (read from `token_source`, named in messages) is what a gated repository needs."""
    bucket, prefix = parse_destination(destination)
    if allow_pickle and not COMMIT.fullmatch(revision):
        # The config refuses this already (core/catalog/models.py unpinned_pickles); a net under it.
        raise StagingError(
            f"--allow_pickle with --revision {revision!r}: pickles run code when they are loaded, so they are staged "
            f"only from a pinned 40-hex commit, never from whatever a branch names now; pin one ({PIPELINE_HINT})"
        )
    commit = resolve(hub, model_id, revision, token, token_source)
    keys = Keys.of(prefix, commit, revision)
    record = read_record(s3, bucket, keys.record)
    if record is not None:
        check_record(
            record, model_id=model_id, commit=commit, allow_pickle=allow_pickle, where=f"s3://{bucket}/{keys.record}"
        )
        print(f"stage_model: {model_id}@{commit} is already staged in s3://{bucket}/{keys.files}", flush=True)
    else:
        files = stage(
            model_id,
            commit,
            output_dir,
            hub=hub,
            deepspeed=deepspeed,
            allow_pickle=allow_pickle,
            token=token,
            readers=readers,
        )
        where = f"{model_id}@{commit}"
        hashes = check_hashes(output_dir, files, hub_hashes(hub, model_id, commit, token), where)
        sizes = {}
        for path in sorted(files):
            name = path.relative_to(output_dir).as_posix()
            s3.upload_file(str(path), bucket, keys.files + name)
            sizes[name] = path.stat().st_size
        # Inside the folder, after the files and before the record: the readers receive the folder, not the record.
        (output_dir / MANIFEST).write_text(json.dumps(manifest(model_id, commit, sizes, hashes), indent=1))
        s3.upload_file(str(output_dir / MANIFEST), bucket, keys.files + MANIFEST)
        record = {
            "model_id": model_id,
            "revision": revision,
            "commit": commit,
            "weights": "pickle" if any(is_pickle(name) for name in sizes) else "safetensors",
            "files": sizes,
            "sha256": hashes,
            "manifest": MANIFEST,
            "staged_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        }
        write_record(s3, bucket, keys.record, record)
        print(f"stage_model: {len(sizes)} files staged in s3://{bucket}/{keys.files}", flush=True)
    if keys.pointer is not None:
        write_record(s3, bucket, keys.pointer, {**record, "revision": revision})
        print(f"stage_model: s3://{bucket}/{keys.pointer} now names {commit}", flush=True)
    return record


def main(argv: list[str] | None = None, *, hub=None, session=None) -> int:
    """The job's entry point; `hub` (the huggingface_hub module) and `session` (a boto3 Session) for tests."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model_id", required=True, help="Hugging Face repository, e.g. EleutherAI/gpt-j-6b")
    parser.add_argument("--revision", required=True, help="a full commit, or a branch to stage its current commit of")
    parser.add_argument("--destination", required=True, help="s3://<models bucket>/pretrained/<name>/")
    parser.add_argument("--region", required=True, help="the models bucket's region")
    parser.add_argument(
        "--output_dir",
        type=Path,
        default=Path("/opt/ml/processing/staging"),
        help="where the download waits for its upload (SageMaker mounts the job's volume at /opt/ml/processing)",
    )
    parser.add_argument("--allow_pickle", action="store_true", help="copy PyTorch pickles when there is no safetensors")
    parser.add_argument(
        "--deepspeed_tp_size", type=int, help="a pre-sharded DeepSpeed checkpoint split for this many ranks"
    )
    parser.add_argument("--deepspeed_dtype", choices=sorted(set(DS_DTYPES.values())), help="... holding these weights")
    parser.add_argument(
        "--hf_token_secret", help="name of the Secrets Manager secret holding a Hugging Face token (gated repositories)"
    )
    parser.add_argument(
        "--readers",
        default="",
        help="the oldest library versions that read the model in the stage, e.g. transformers=4.46.3,tokenizers=0.20.3",
    )
    args = parser.parse_args(argv)
    try:
        readers = parse_readers(args.readers)
    except ValueError as error:
        parser.error(f"--readers: {error}")
    if (args.deepspeed_tp_size is None) != (args.deepspeed_dtype is None):
        parser.error("--deepspeed_tp_size and --deepspeed_dtype go together: give both, or neither")
    try:
        parse_destination(args.destination)
    except ValueError as error:
        parser.error(str(error))
    deepspeed = None if args.deepspeed_tp_size is None else (args.deepspeed_tp_size, args.deepspeed_dtype)
    args.output_dir.mkdir(parents=True, exist_ok=True)

    if session is None:
        import boto3

        session = boto3.Session(region_name=args.region)
    if hub is None:
        import huggingface_hub as hub

    try:
        token = None
        if args.hf_token_secret:
            token = read_token(session.client("secretsmanager", region_name=args.region), args.hf_token_secret)
            print(f"stage_model: using the Hugging Face token in secret {args.hf_token_secret}", flush=True)
        run(
            args.model_id,
            args.revision,
            args.destination,
            args.output_dir,
            hub=hub,
            s3=session.client("s3", region_name=args.region),
            deepspeed=deepspeed,
            allow_pickle=args.allow_pickle,
            token=token,
            token_source=f"secret {args.hf_token_secret}",
            readers=readers,
        )
    except StagingError as error:
        print(f"stage_model.py: error: {error}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
