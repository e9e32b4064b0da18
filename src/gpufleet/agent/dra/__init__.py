"""The node agent as a DRA driver (`gpufleet agent --dra`), under NVIDIA's driver name `gpu.nvidia.com`.

- `slices`: the node's ResourceSlices from what NVML tells (through the builder the twin shares,
  `gpufleet.sharing.dra_slices`), healthy devices only;
- `cdi`: the CDI spec written for a prepared claim, and the CDI device ids handed to the kubelet;
- `checkpoint`: the prepared claims, kept in a file so that prepare and unprepare survive a restart;
- `driver`: prepare / unprepare of claims and the slices kept current as GPUs fail and recover;
- `server`: the kubelet's DRA gRPC API (v1 and v1beta1) and the plugin-registration socket.

Reading claims and writing slices goes through callables the CLI gives (only `kube` uses the client).
"""
