"""Facts with one home each, used by config validation, the stacks and the plan."""
