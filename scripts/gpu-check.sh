#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: runs the agent's real NVML discovery, prints the labels, the devices
# it would advertise and one scrape of its DCGM-style metrics, and exits non-zero if anything disagrees
# with nvidia-smi (GPU count, UUIDs, names, memory, PCI bus IDs, compute capability, MIG mode and
# devices, driver and CUDA versions, NVLink pairs, temperatures and memory in use).
#
# Usage: scripts/gpu-check.sh [OUTPUT_DIR]   (PYTHON=... picks the interpreter; default .venv/bin/python)
# The recorded profile is written to OUTPUT_DIR/node.json, ready to add to src/gpufleet/agent/profiles/.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-.venv/bin/python}
[ -x "$python" ] || python=python3
out=${1:-$(mktemp -d)}
mkdir -p "$out"

if ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "gpu-check: no nvidia-smi here; run this on a machine with an NVIDIA GPU and driver" >&2
  exit 2
fi

nvidia-smi --query-gpu=index,uuid,name,memory.total,pci.bus_id,compute_cap,mig.mode.current,driver_version,temperature.gpu,memory.used \
  --format=csv,noheader,nounits >"$out/nvidia-smi.csv"
nvidia-smi -L >"$out/nvidia-smi-L.txt"
nvidia-smi topo -m >"$out/nvidia-smi-topo.txt" 2>&1 || true
nvidia-smi >"$out/nvidia-smi.txt"

echo "== discovery, labels and advertised devices (gpufleet agent inspect)"
"$python" -m gpufleet.cli.main agent inspect --record "$out/node.json"

echo "== comparison with nvidia-smi"
PYTHONPATH=src "$python" - "$out" <<'PY'
import csv
import re
import sys
from pathlib import Path

from gpufleet.agent.exporter import DcgmCollector, render
from gpufleet.agent.nvml import RealNvml, normalize_bus_id

out = Path(sys.argv[1])
problems: list[str] = []


def check(what: str, ours: object, theirs: object) -> None:
    ok = ours == theirs
    print(f"{'ok  ' if ok else 'DIFF'} {what}: gpufleet={ours!r} nvidia-smi={theirs!r}")
    if not ok:
        problems.append(what)


backend = RealNvml()
node = backend.discover()
rows = [[c.strip() for c in row] for row in csv.reader((out / "nvidia-smi.csv").read_text().splitlines()) if row]
check("GPU count", len(node.gpus), len(rows))
for gpu, row in zip(node.gpus, rows):
    index, uuid, name, memory, bus, cc, mig_mode, driver, _temp, _used = row
    where = f"GPU {index}"
    check(f"{where} index", str(gpu.index), index)
    check(f"{where} UUID", gpu.uuid, uuid)
    check(f"{where} name", gpu.name, name)
    check(f"{where} memory MiB", gpu.memory_mib, int(memory))
    check(f"{where} PCI bus", normalize_bus_id(gpu.pci_bus_id), normalize_bus_id(bus))
    check(f"{where} compute capability", f"{gpu.compute_capability[0]}.{gpu.compute_capability[1]}", cc)
    if mig_mode not in ("[N/A]", "N/A"):
        check(f"{where} MIG enabled", gpu.mig_enabled, mig_mode == "Enabled")
    check(f"{where} driver", node.driver_version, driver)

# MIG devices as `nvidia-smi -L` lists them: "  MIG 1g.10gb     Device  0: (UUID: MIG-...)"
listed = re.findall(r"MIG (\S+)\s+Device\s+\d+: \(UUID: (MIG-[^)]+)\)", (out / "nvidia-smi-L.txt").read_text())
ours = sorted((m.profile, m.uuid) for g in node.gpus for m in g.mig_devices)
check("MIG devices (profile, UUID)", ours, sorted(listed))

cuda = re.search(r"CUDA Version:\s*(\d+)\.(\d+)", (out / "nvidia-smi.txt").read_text())
if cuda:
    check("CUDA version", node.cuda_version, (int(cuda.group(1)), int(cuda.group(2))))

# NVLink: every pair nvidia-smi shows as NV# must be in one of our NVLink domains, and vice versa.
topo = (out / "nvidia-smi-topo.txt").read_text().splitlines()
header = next((line.split() for line in topo if line.split()[:1] == ["GPU0"]), None)
if header:
    gpus = [h for h in header if re.fullmatch(r"GPU\d+", h)]
    nv_pairs = set()
    for line in topo:
        cells = line.split()
        if cells and re.fullmatch(r"GPU\d+", cells[0]):
            i = int(cells[0][3:])
            for j, cell in enumerate(cells[1 : 1 + len(gpus)]):
                if cell.startswith("NV") and i < j:
                    nv_pairs.add((i, j))
    domain = {g: k for k, d in enumerate(node.nvlink_domains()) for g in d}
    ours_pairs = {(i, j) for i in domain for j in domain if i < j and node.nvlinks(i, j)}
    check("NVLink-connected GPU pairs", sorted(ours_pairs), sorted(nv_pairs))

print("== one scrape")
text = render([DcgmCollector(backend, node, hostname=node.hostname)]).decode()
print(text)
def per_gpu(metric: str) -> dict[str, float]:
    """GPU index -> value of a whole-GPU series (MIG series carry GPU_I_ID and are left out)."""
    values = {}
    for match in re.finditer(rf"^{metric}\{{([^}}]*)\}} (\S+)$", text, re.M):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1)))
        if "GPU_I_ID" not in labels:
            values[labels["gpu"]] = float(match.group(2))
    return values


temps = per_gpu("DCGM_FI_DEV_GPU_TEMP")
used = per_gpu("DCGM_FI_DEV_FB_USED")
if len(temps) != len(node.gpus) and not any(g.mig_enabled for g in node.gpus):
    problems.append("one DCGM_FI_DEV_GPU_TEMP series per GPU")
for row in rows:
    index, temp, mem_used = row[0], row[8], row[9]
    if index in temps and temp.isdigit():
        close = abs(temps[index] - float(temp)) <= 5
        print(f"{'ok  ' if close else 'DIFF'} GPU {index} temperature: gpufleet={temps[index]} nvidia-smi={temp}")
        if not close:
            problems.append(f"GPU {index} temperature")
    if index in used and mem_used.isdigit():
        close = abs(used[index] - float(mem_used)) <= max(64, 0.05 * float(mem_used))
        print(f"{'ok  ' if close else 'DIFF'} GPU {index} memory used: gpufleet={used[index]} nvidia-smi={mem_used}")
        if not close:
            problems.append(f"GPU {index} memory used")
backend.close()
if problems:
    print(f"gpu-check: {len(problems)} disagreement(s) with nvidia-smi: {', '.join(problems)}")
    sys.exit(1)
print("gpu-check: discovery agrees with nvidia-smi")
PY
