#!/usr/bin/env bash
# Regenerates the Python stubs of the kubelet gRPC APIs the node agent speaks (device plugin
# v1beta1, PodResources v1, DRA v1 and v1beta1, plugin registration v1) from the .proto files beside
# them, with grpcio-tools. The stubs are committed, so running the agent needs no protoc;
# tests/agent/test_protos.py fails when they are stale.
# Usage: scripts/gen-protos.sh [OUTPUT_ROOT]   (default: src, i.e. regenerate in place)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-src}
python=${PYTHON:-.venv/bin/python}
for dir in gpufleet/agent/deviceplugin/_generated gpufleet/agent/dra/_generated; do
  mkdir -p "$out/$dir"
  "$python" -m grpc_tools.protoc -I src --python_out="$out" --grpc_python_out="$out" --pyi_out="$out" \
    "src/$dir"/*.proto
done
