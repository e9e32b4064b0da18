"""The Store protocol and its embedded SQLite implementation."""
