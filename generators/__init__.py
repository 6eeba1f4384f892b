"""What is generated from the core and the synthesized app: the plan, the docs pages, the JSON Schema, the
diagram and the acknowledgements. Each module runs as `python -m generators.<name>` (`make docs`, `make synth`)."""
