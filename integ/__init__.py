"""The integration suite: a real stage of this platform deployed into the caller's own AWS account, trained, served,
checked and destroyed, with a cost estimate first and a report after (docs/integration-tests.md).

    make integ DRY_RUN=1        # the plan, the estimate and the ordered steps; no credentials, no AWS call
    make integ                  # asks before it starts (on a terminal); YES=1 skips the question

Modules, one job each: steps (the ordered steps and their limits), estimate (what they cost), engine (runs them,
stops at the deadline or the ceiling, always tears down), actions (each step's body), commands (the CDK CLI and llmp,
as a user runs them), aws (every AWS call made directly), teardown, report, dataset, run (the command line).
"""
