"""`make rehearse`: deploy one stage through the real CDK CLI onto moto's AWS emulator, check it, destroy it.

    .venv/bin/python -m rehearsal.rehearse                  # stage staging of config/default.yaml
    .venv/bin/python -m rehearsal.rehearse --stage prod --config path/to/config.yaml
    .venv/bin/python -m rehearsal.examples                  # every file in config/examples/ (make rehearse-examples)

Modules, one job each:
- `overlay`: the overlay for the stage, generated from the config: empty when the emulator takes the stage as
  configured (every endpoint instance type SageMaker's API takes); else an instance type it accepts and what the
  config's checks then need changed with it, or why no such type can serve the stage's model.
- `emulator`: moto's server, with the fixes our CDK app needs to deploy through change sets and be destroyed as
  CloudFormation would (runs in its own process).
- `server`: starts that process on a free loopback port and always stops it.
- `cdk_cli`: the pinned CDK CLI with an environment that can only reach the emulator.
- `assembly`: reads the synthesized cloud assembly and resolves template values against what was deployed.
- `deployment`: the deployed stacks (physical ids, exports, attributes) and clients that reach only the emulator.
- `findings`: what a check found: a Check (PASS/FAIL) or a Gap (not emulated, so not checkable).
- `checks`: what the emulator can represent, compared with the templates, after deploy and after a redeploy.
- `retention`: what the stage's removal policy promises (retain: buckets, keys, log groups and data kept; destroy: all
  deleted, keys pending deletion), the auto-delete custom resource's work before destroy, and the checks after it.
- `gaps`: what moto does not emulate, found in the templates, the server log and the deployed resources.
- `rehearse`: the steps in order, the report and the exit status.
- `examples`: the rehearsal of every example, each in its own process, and the table of outcomes.

`make rehearse-promotion` (issue 24): an approved version copied into a stage of another account, on moto's server.
- `promotion_grants`: which promotion of the config, its synthesis, and the grants its templates give.
- `promotion`: the two accounts, the promotion handler run as the Provider runs it, and the checks.
"""
