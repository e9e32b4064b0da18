"""The gpufleet command."""
