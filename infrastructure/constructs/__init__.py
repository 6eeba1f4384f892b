"""Reusable constructs: where the logic lives. Stacks only wire these together."""
