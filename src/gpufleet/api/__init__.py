"""Resource kinds, YAML load/dump, quantities and the errors users can cause."""
