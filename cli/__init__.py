"""llmp: the operator's command line for a deployed platform.

It reads the same config file as `make synth` (stacks.config) and finds everything else in the deployed stacks'
outputs (CloudFormation DescribeStacks), so no ARN is ever copied by hand. It sits above stacks/: it imports the
config and the plan; nothing in stacks/, training/ or model_artifacts/ imports it.

    app.py        the Typer app, its options and exit codes
    aws.py        credentials, the stage's account, the stacks and their outputs
    errors.py     failures as one line with the fix, and their exit codes
    render.py     Rich tables and progress for people, JSON for scripts
    follow.py     a pipeline run's steps, followed live
    streaming.py  a streamed endpoint answer, decoded as it arrives
    commands/     one module per group of commands
"""
