"""Control-plane metrics and log setup, the same in every world (see docs/observability.md)."""
