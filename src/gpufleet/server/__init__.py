"""The embedded HTTP API."""
