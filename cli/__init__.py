"""llmp: the operator's command line for a deployed platform.

It reads the same config file as `make synth` (core.config) and finds everything else in the deployed stacks'
outputs (CloudFormation DescribeStacks), so no ARN is ever copied by hand. It sits above core/: it imports the config,
the resource names and the plan, never the CDK side (infrastructure/); nothing else in the repository imports it.

    app.py        the Typer app, its options and exit codes
    aws.py        credentials, the stage's account, the stacks and their outputs
    errors.py     failures as one line with the fix, and their exit codes
    render.py     Rich tables and progress for people, JSON for scripts
    follow.py     a pipeline run's steps, followed live
    streaming.py  a streamed endpoint answer, decoded as it arrives
    commands/     one module per group of commands
"""
