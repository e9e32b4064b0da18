"""gpufleet: one programmable pool out of a fleet of GPUs."""

__version__ = "0.1.0"
