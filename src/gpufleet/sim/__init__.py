"""Trace loaders, experiment protocols, metrics, reports and plots."""
