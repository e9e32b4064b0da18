"""The digital twin: virtual nodes and pods, clocks, failure and spot models."""
