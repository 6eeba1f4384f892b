"""Deploy a real stage into your own AWS account, train, serve, check, and destroy it; report what happened.

    make integ DRY_RUN=1                        # the plan, the estimate, the steps: no credentials, no AWS call
    make integ                                  # asks first on a terminal; refuses without --yes elsewhere
    make integ YES=1                            # CI: no question
    .venv/bin/python -m integ.run --max-usd 15 --deadline-minutes 240 --yes

Before it starts it prints the plan of the stage, the estimated cost (the plan's $/h x each step's expected
minutes) and the longest it can run. Each step has its own timeout; before each one the run stops if the dollar
ceiling (--max-usd) or the deadline (--deadline-minutes) would not cover it. Whatever happens (success, a failure,
Ctrl-C, SIGTERM) it then destroys what it deployed and lists anything left, with the command that removes it. The
report goes to integ/reports/<UTC timestamp>/ (report.md, report.json, the commands' logs).

After a run that could not tear down (killed with SIGKILL, a cancelled CI job), `--teardown-only` runs teardown alone.

Exit status: 0 every step passed and nothing is left; 1 a step failed, or teardown left something; 2 usage, or the
run was refused (no --yes without a terminal, an estimate above the ceiling); 3 stopped by the ceiling or the
deadline; 130 interrupted (after teardown).
"""

from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

from cli.errors import CliError, aws_errors
from core.config import load_config
from core.naming import StageNames
from generators import plan as planning
from integ import report as reporting
from integ import steps as step_list
from integ.actions import Actions
from integ.aws import IntegAws
from integ.commands import REPO, Commands
from integ.engine import INTERRUPTED, STOPPED, execute
from integ.estimate import Budget, Estimate, estimate, hourly_rates
from integ.teardown import stage_components, teardown

DEFAULT_CONFIG = "integ/config.yaml"
DEFAULT_MAX_USD = 15.0
DEFAULT_DEADLINE_MINUTES = 300.0
REPORTS = REPO / "integ" / "reports"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m integ.run", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", default=DEFAULT_CONFIG, help=f"the stage's config (default {DEFAULT_CONFIG})")
    parser.add_argument("--stage", help="the stage to deploy (default: the config's first)")
    parser.add_argument("--dry-run", action="store_true", help="print the plan, estimate and steps; call nothing")
    parser.add_argument("--yes", action="store_true", help="start without asking (CI)")
    parser.add_argument(
        "--teardown-only",
        action="store_true",
        help="run no step: only take down what an earlier run left (after a kill, or a cancelled CI job)",
    )
    parser.add_argument(
        "--max-usd", type=float, default=DEFAULT_MAX_USD, help=f"dollar ceiling (default {DEFAULT_MAX_USD:g})"
    )
    parser.add_argument(
        "--deadline-minutes",
        type=float,
        default=DEFAULT_DEADLINE_MINUTES,
        help=f"the whole run, teardown included (default {DEFAULT_DEADLINE_MINUTES:g})",
    )
    parser.add_argument("--reports", type=Path, default=REPORTS, help="where the report's folder goes")
    args = parser.parse_args(argv)
    if args.max_usd <= 0 or args.deadline_minutes <= 0:
        parser.error("--max-usd and --deadline-minutes must be above 0")
    return args


def preview(config_path: str, stage_name: str | None, max_usd: float, deadline_minutes: float) -> tuple[str, ...]:
    """(text, stage name, estimate) of what a run would do: no AWS call, no credentials."""
    config = load_config(REPO / config_path, only_stage=stage_name)
    name = stage_name or next(iter(config.stages))
    stage = config.stages[name]
    steps = step_list.steps_for(stage)
    rates = hourly_rates(stage)
    cost = estimate(steps, rates)
    lines = [f"Integration run of {config_path}, stage {name} (project {config.project})", ""]
    lines += [planning.describe_stage(name, stage, config.stage_account(name))]
    lines += planning.describe_training(stage.training) + planning.describe_serving(stage.serving)
    lines += [
        "",
        "Rates while steps run ($/h, the plan's prices): " + ", ".join(f"{k} ${v:,.2f}" for k, v in rates.items()),
    ]
    lines += ["", f"{'#':>2}  {'step':<19}{'expected':>9}{'timeout':>9}{'bills':>10}{'est. $':>8}  what"]
    for number, step in enumerate((*steps, step_list.TEARDOWN), start=1):
        usd = rates[step.bills] * step.expected_minutes / 60
        lines.append(
            f"{number:>2}  {step.name:<19}{step.expected_minutes:>7g} m{step.timeout_minutes:>7g} m"
            f"{step.bills:>10}{usd:>8.2f}  {step.what}"
        )
    lines += ["", *summary(cost, max_usd, deadline_minutes)]
    return "\n".join(lines) + "\n", name, cost


def summary(cost: Estimate, max_usd: float, deadline_minutes: float) -> list[str]:
    return [
        f"estimated cost: ${cost.expected_usd:,.2f} over {cost.expected_minutes:g} min (every step at its expected "
        f"time); at most ${cost.worst_usd:,.2f} if every step ran to its timeout",
        f"longest it can run: {min(cost.longest_minutes, deadline_minutes):g} min (steps' timeouts "
        f"{cost.longest_minutes:g} min, deadline {deadline_minutes:g} min); dollar ceiling ${max_usd:,.2f}",
        "teardown always runs: on success, on a failure, on Ctrl-C or SIGTERM",
    ]


def confirmed(yes: bool, question: str) -> bool:
    if yes:
        return True
    if not sys.stdin.isatty():
        print("integ: not on a terminal and no --yes (make integ YES=1): refusing to deploy", file=sys.stderr)
        return False
    return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    text, stage_name, cost = preview(args.config, args.stage, args.max_usd, args.deadline_minutes)
    print(text, end="", flush=True)
    if args.dry_run:
        print("dry run: nothing deployed, no AWS call made")
        return 0
    if cost.expected_usd > args.max_usd and not args.teardown_only:
        print(f"integ: the estimate ${cost.expected_usd:,.2f} is above --max-usd {args.max_usd:g}", file=sys.stderr)
        return 2
    config = load_config(REPO / args.config, only_stage=stage_name)
    stage = config.stages[stage_name]
    names = StageNames(config.project, stage_name)
    aws = IntegAws(stage.region)
    try:
        with aws_errors():
            account = aws.caller_account()
    except CliError as error:  # no credentials, expired, denied: one line that says what to do (cli/errors.py)
        print(f"integ: {error}", file=sys.stderr)
        return 2
    expected_account = config.stage_account(stage_name)
    if expected_account and expected_account != account:
        print(f"integ: stage {stage_name} is in {expected_account}; the credentials are {account}", file=sys.stderr)
        return 2
    question = (
        f"Destroy {names.prefix} in account {account}, {stage.region}?"
        if args.teardown_only
        else f"Deploy {names.prefix} into account {account}, {stage.region}, and pay for it?"
    )
    if not confirmed(args.yes, question):
        return 2
    folder = args.reports / datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    commands = Commands(args.config, stage_name, folder / "logs")
    steps = () if args.teardown_only else step_list.steps_for(stage)
    budget = Budget(args.max_usd, args.deadline_minutes, hourly_rates(stage))
    components = stage_components(names, stage.serving)
    run = execute(
        steps,
        Actions(commands, aws, stage, names).bodies(),
        budget,
        lambda limit: teardown(aws, commands.destroy, names, components, timeout_s=limit),
    )
    data = reporting.as_json(
        run,
        config=args.config,
        stage=stage_name,
        account=account,
        region=stage.region,
        estimate=cost,
        ceiling_usd=args.max_usd,
        deadline_minutes=args.deadline_minutes,
    )
    reporting.write(folder, data)
    print(reporting.markdown(data))
    print(f"report: {folder / 'report.md'}")
    return exit_status(run)


def exit_status(run) -> int:
    outcomes = {r.outcome for r in run.results}
    if INTERRUPTED in outcomes or run.stopped.endswith("between steps"):
        return 130
    if run.passed:
        return 0
    if run.teardown is None or run.teardown.problems or run.teardown.leftovers:
        return 1
    return 3 if STOPPED in outcomes else 1


if __name__ == "__main__":
    sys.exit(main())
