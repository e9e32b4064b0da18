"""The node agent: NVML discovery, kubelet device plugin, XID health, DCGM-style exporter and node labels."""
