"""Tests of promotion/: the Lambda that copies an approved version into another stage and registers it there."""
