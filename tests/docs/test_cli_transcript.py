"""docs/operations.md's transcript is what `llmp` prints today: cli/reference/transcript.py runs the session again
against moto and compares."""

from __future__ import annotations

from cli.reference import transcript as cli_transcript


def test_the_transcript_in_the_operations_page_is_the_one_the_session_prints_now():
    current = cli_transcript.SECTION.current(cli_transcript.OPERATIONS.read_text())
    assert current, "docs/operations.md has lost its <!-- transcript:begin --> ... <!-- transcript:end --> markers"
    assert current == cli_transcript.section(), "run `python -m cli.reference.transcript --write` (make docs)"
