"""The scheduling view of the cluster: nodes, GPUs, topology, allocations and the snapshot."""
