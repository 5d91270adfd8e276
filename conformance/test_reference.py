"""attnspec's reference, judged by its own conformance suite: one test per property."""

ATTNSPEC_SUBJECT = "attnspec.subjects.reference"
