"""deploy."""
