"""The tests that also run in the environment of a container image the handler runs in, declared once.

Each key names an environment of `make test-containers` (scripts/test_containers.py: requirements/images/<key>.txt
and <key>-deepspeed.txt); its list holds the test files (or node ids) run there with that venv's python, so that an API
the image's libraries lack fails in the tests, not on an endpoint. A plain literal: read it with ast.literal_eval or
import it (Python 3.10+, no dependencies).

Not covered in lmi-0.27 (tests/model_artifacts/ is selected whole; these are limits of the environment, not tests
left out): what needs a GPU and the CUDA build of DeepSpeed 0.12.6: kernel injection, pre-sharded (meta device)
checkpoints and int8 run through tests/model_artifacts/deepspeed_standin.py there as in the dev venv; real
tensor-parallel inference (init_inference with tp_size > 1) is not run (the distributed tests stub the load); the
DeepSpeed CPU accelerator's two Intel import gates are stood in (tests/model_artifacts/conftest.py); DJL itself is
local/djl_python and local/djl_frontend.
"""

SELECTIONS = {
    "lmi-0.27": [
        "tests/model_artifacts/test_deepspeed_batching.py",
        "tests/model_artifacts/test_deepspeed_handler.py",
        "tests/model_artifacts/test_deepspeed_standin.py",
        "tests/model_artifacts/test_handler_serving_properties.py",
        "tests/model_artifacts/test_kernel_workspace_warm_up.py",
        "tests/model_artifacts/test_lmi_config.py",
        "tests/model_artifacts/test_lmi_distributed.py",
        "tests/model_artifacts/test_lmi_folder_check.py",
        "tests/model_artifacts/test_lmi_image_packages.py",
        "tests/model_artifacts/test_lmi_loading.py",
        "tests/model_artifacts/test_lmi_requests.py",
        "tests/model_artifacts/test_lmi_streaming.py",
    ],
}
