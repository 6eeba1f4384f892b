"""`make rehearse`: deploy one stage through the real CDK CLI onto moto's AWS emulator, check it, destroy it.

    .venv/bin/python -m rehearsal.rehearse                  # stage staging of config/default.yaml
    .venv/bin/python -m rehearsal.rehearse --stage prod --config path/to/config.yaml

Modules, one job each:
- `emulator`: moto's server, with the fixes a multi-stack CDK app needs to deploy through change sets (runs in
  its own process).
- `server`: starts that process on a free loopback port and always stops it.
- `cdk_cli`: the pinned CDK CLI with an environment that can only reach the emulator.
- `assembly`: reads the synthesized cloud assembly and resolves template values against what was deployed.
- `deployment`: the deployed stacks (physical ids, exports, attributes) and clients that reach only the emulator.
- `findings`: what a check found: a Check (PASS/FAIL) or a Gap (not emulated, so not checkable).
- `checks`: what the emulator can represent, compared with the templates, after deploy and after a redeploy.
- `retention`: after destroy: stacks gone, everything marked Retain still there, the endpoint deleted.
- `gaps`: what moto does not emulate, found in the templates, the server log and the deployed resources.
- `rehearse`: the steps in order, the report and the exit status.

`make rehearse-promotion` (issue 24): an approved version copied into a stage of another account, on moto's server.
- `promotion_grants`: which promotion of the config, its synthesis, and the grants its templates give.
- `promotion`: the two accounts, the promotion handler run as the Provider runs it, and the checks.
"""
