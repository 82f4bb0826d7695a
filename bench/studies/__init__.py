"""One-off studies: the measurement behind a decision in docs/decisions.md, kept to be re-run."""
