"""Benchmarks of the platform, measured side by side on one machine: `make bench` writes BENCHMARKS.md.

Modules: synth (CDK synthesis against a minimal app, and where its time goes), synth_phases (the in-process
breakdown, run in fresh interpreters), profiles (cProfile and V8 profile summaries), handler (inference handler
overhead), training (train.py step overhead), artifacts (code archives, redeploy with no change), cold_start
(weights onto an instance, on paper), suite (the test suite and a fresh clone's set-up), gpu (`make bench-gpu`),
stats and machine (shared).
"""
