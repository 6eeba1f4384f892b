"""What `llmp` documents about itself in docs/operations.md, generated from its code (make docs): the exit-status
table (exit_table) and a session recorded against moto (transcript, on the deployed-looking stage of fake_stage,
which tests/cli runs against too)."""
