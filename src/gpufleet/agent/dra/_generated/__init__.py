"""The Python stubs of the kubelet DRA and plugin-registration APIs; regenerate with scripts/gen-protos.sh."""
