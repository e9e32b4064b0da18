"""The kubelet device plugin: resources, allocation and the v1beta1 gRPC servers."""
