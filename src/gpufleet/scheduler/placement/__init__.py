"""Placement: filters, scores, gangs and topology."""
