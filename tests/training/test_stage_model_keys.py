"""stage_model.py's S3 keys against the ones the stacks read (core/catalog/models.py): a check of the CDK side,
so it runs in the dev suite only, apart from test_stage_model.py, which also runs in the image environments
(tests/training/image_environments.py)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "training"))
import stage_model
from test_stage_model import MAIN

from core.catalog.models import MODELS


def test_the_keys_are_the_ones_the_stacks_read():
    model = MODELS["bloom-176b"]
    pinned = model.staged("deepspeed-int8-tp8", allow_pickle=True)
    keys = stage_model.Keys.of(pinned.prefix, pinned.revision, pinned.revision)
    assert (keys.files, keys.record, keys.pointer) == (pinned.files_prefix(pinned.revision), pinned.record_key, None)
    followed = MODELS["gpt-j-6b"].staged()
    keys = stage_model.Keys.of(followed.prefix, MAIN, "main")
    assert (keys.files, keys.pointer) == (followed.files_prefix(MAIN), followed.record_key)
