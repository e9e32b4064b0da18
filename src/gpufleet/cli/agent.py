"""CLI commands: agent (`gpufleet agent` runs the node agent; `gpufleet agent inspect` shows what it sees)."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from gpufleet.agent import migparted
from gpufleet.agent.config import AgentConfig, load_config, overlay_named_config, with_flags
from gpufleet.agent.deviceplugin.resources import build_resources, device_ids
from gpufleet.agent.deviceplugin.server import DEVICE_PLUGIN_PATH
from gpufleet.agent.dra.cdi import CDI_DIR
from gpufleet.agent.dra.server import PLUGINS_DIR, PLUGINS_REGISTRY, DraSettings
from gpufleet.agent.dra.slices import node_slice_specs
from gpufleet.agent.exporter import DEFAULT_PORT, POD_RESOURCES_SOCKET
from gpufleet.agent.labels import gfd_labels, node_label_patch
from gpufleet.agent.nvml import NodeInfo, RealNvml, bundled_profiles, node_to_json, open_backend, uuids
from gpufleet.agent.nvml.migctl import MigControl
from gpufleet.agent.runtime import Agent
from gpufleet.api.errors import ValidationError
from gpufleet.kube.agent_config import RESYNC_SECONDS, NodeSharingConfig, SharingConfigWatcher
from gpufleet.observability.logs import setup_logging
from gpufleet.sharing.dra_slices import slice_name

log = logging.getLogger("gpufleet.agent")
Reporter = Callable[..., None]

app = typer.Typer(
    rich_markup_mode=None,
    name="agent",
    help="The node agent: GPU discovery, kubelet device plugin, XID health, DCGM-style metrics, node labels.",
    invoke_without_command=True,
    no_args_is_help=False,
)

_PROFILE_HELP = "a recorded node profile (JSON file, or a bundled name: {}); default: real NVML"
_MIG_STRATEGY_HELP = (
    "how MIG devices are advertised: none (MIG-mode GPUs whole, as nvidia.com/gpu), single (MIG devices "
    "as nvidia.com/gpu) or mixed (one nvidia.com/mig-<profile> resource per profile). Overrides "
    "flags.migStrategy of every config file, the local --config and the pool's ConfigMap entry; the "
    "order is NVIDIA's device plugin's: this flag, then MIG_STRATEGY, then the config file (default none)"
)
MIG_STRATEGY_SOURCE = "--mig-strategy (or MIG_STRATEGY)"


class MigStrategy(StrEnum):
    """The NVIDIA device plugin's MIG strategies."""

    none = "none"
    single = "single"
    mixed = "mixed"


def _pinned(mig_strategy: MigStrategy | None) -> dict[str, Any]:
    """The flags set on the command line or in the environment, which win over the config files."""
    return {} if mig_strategy is None else {"mig_strategy": mig_strategy.value}


def register(parent: typer.Typer) -> None:
    """Adds this area's commands to the gpufleet app."""
    parent.add_typer(app, name="agent")


@app.callback()
def run(
    ctx: typer.Context,
    node_name: str = typer.Option(
        None, "--node-name", envvar="NODE_NAME", help="this node's name in Kubernetes"
    ),
    profile: str = typer.Option(None, "--profile", help=_PROFILE_HELP.format(", ".join(bundled_profiles()))),
    config: Path = typer.Option(None, "--config", help="config file in the NVIDIA device plugin's format"),
    mig_strategy: MigStrategy = typer.Option(
        None, "--mig-strategy", envvar="MIG_STRATEGY", case_sensitive=False, help=_MIG_STRATEGY_HELP
    ),
    plugin_dir: Path = typer.Option(
        Path(DEVICE_PLUGIN_PATH), "--plugin-dir", help="kubelet's device-plugin dir"
    ),
    metrics_port: int = typer.Option(DEFAULT_PORT, "--metrics-port", help="port of the DCGM-style /metrics"),
    metrics_address: str = typer.Option("", "--metrics-address", help="address to listen on (default: all)"),
    pod_resources_socket: Path = typer.Option(
        Path(POD_RESOURCES_SOCKET), "--pod-resources-socket", help="kubelet PodResources socket"
    ),
    feature_file: str = typer.Option(
        None,
        "--feature-file",
        help="node-feature-discovery file for the labels ('' for none; default: config flags.gfd.outputFile)",
    ),
    label_node: bool = typer.Option(
        None, "--label-node/--no-label-node", help="apply the labels to the Node (default: when in a cluster)"
    ),
    sharing_config: bool = typer.Option(
        None,
        "--sharing-config/--no-sharing-config",
        help="follow the Node's gpufleet.io/sharing-config label: apply the entry its "
        "nvidia.com/device-plugin.config label picks from that ConfigMap over --config, and re-apply "
        "on changes (default: when in a cluster)",
    ),
    sharing_namespace: str = typer.Option(
        "gpufleet-system", "--sharing-namespace", help="namespace of the sharing ConfigMaps (the operator's)"
    ),
    sharing_resync: float = typer.Option(
        RESYNC_SECONDS,
        "--sharing-resync",
        help="seconds between reads of the Node's labels (sooner while they name a ConfigMap or key that "
        "does not exist yet: from 1 s, doubling up to this)",
    ),
    dra: bool = typer.Option(
        False,
        "--dra/--no-dra",
        help="serve the GPUs as a DRA driver (gpu.nvidia.com: ResourceSlices, the kubelet's DRA gRPC API, "
        "CDI specs) instead of the nvidia.com/gpu device plugin",
    ),
    dra_plugins_dir: Path = typer.Option(
        Path(PLUGINS_DIR), "--dra-plugins-dir", help="kubelet's plugins dir (the DRA socket and checkpoint)"
    ),
    dra_registry_dir: Path = typer.Option(
        Path(PLUGINS_REGISTRY), "--dra-registry-dir", help="kubelet's plugin registry dir"
    ),
    cdi_dir: Path = typer.Option(
        Path(CDI_DIR), "--cdi-dir", help="where the container runtime reads CDI specs"
    ),
    nvidia_ctk: str = typer.Option(
        "nvidia-ctk",
        "--nvidia-ctk",
        help="with --dra: the NVIDIA Container Toolkit's CLI, asked once for the driver's common CDI edits "
        "(libraries, hooks) that every claim's spec carries; '' for device nodes only",
    ),
    dra_dynamic_mig: bool = typer.Option(
        False,
        "--dra-dynamic-mig/--no-dra-dynamic-mig",
        help="with --dra: publish every MIG placement of MIG-enabled GPUs and create the allocated "
        "instance at prepare (NVIDIA's DynamicMIG); the agent then owns those GPUs' MIG layout",
    ),
    kubeconfig: str = typer.Option(
        None, "--kubeconfig", help="with --dra: the API server's kubeconfig (default: in-cluster, KUBECONFIG)"
    ),
    log_level: str = typer.Option("info", "--log-level", help="debug, info, warning or error"),
    log_format: str = typer.Option(
        "text", "--log-format", help="text (for a terminal) or json (one object a line)"
    ),
) -> None:
    """Runs discovery, the device plugin (or the DRA driver), health checks and the exporter until SIGTERM
    or SIGINT."""
    if ctx.invoked_subcommand is not None:
        return
    if not node_name:
        raise typer.BadParameter("--node-name (or NODE_NAME) is required", param_hint="--node-name")
    setup_logging(log_format, level=log_level.upper())
    pinned = _pinned(mig_strategy)
    cfg = with_flags(load_config(config, env=os.environ), pinned)
    backend = open_backend(profile)
    mig_control = None
    if dra and dra_dynamic_mig:
        if not isinstance(backend, RealNvml):
            raise typer.BadParameter(
                "creates MIG instances through NVML: it needs the node's driver, not a recorded --profile",
                param_hint="--dra-dynamic-mig",
            )
        mig_control = backend.mig_control()
    if label_node is None:
        label_node = bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    labeler = None
    if label_node:
        from gpufleet.kube.node_labels import node_labeler

        labeler = node_labeler(node_label_patch)
    with _naming_the_config(config, pinned):
        agent = Agent(
            backend,
            cfg,
            node_name=node_name,
            plugin_dir=plugin_dir,
            metrics_port=metrics_port,
            metrics_address=metrics_address,
            pod_resources_socket=pod_resources_socket,
            feature_file=cfg.flags.gfd.output_file if feature_file is None else feature_file or None,
            node_labeler=labeler,
            dra=(
                _dra_settings(kubeconfig, dra_plugins_dir, dra_registry_dir, cdi_dir, nvidia_ctk, mig_control)
                if dra
                else None
            ),
        )
    done = threading.Event()
    if sharing_config is None:
        sharing_config = bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    if sharing_config:
        _follow_sharing_config(agent, cfg, config, pinned, sharing_namespace, sharing_resync, done)

    def on_signal(signum: int, frame: Any) -> None:
        if signum == signal.SIGHUP:
            if agent.dra is None:  # the DRA driver's registration socket stays; the kubelet finds it
                threading.Thread(target=agent.plugins.restart, daemon=True).start()
            return
        done.set()
        agent.stop()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    agent.start()
    try:
        agent.run()
    finally:
        if not done.is_set():
            agent.stop()


def _dra_settings(
    kubeconfig: str | None,
    plugins_dir: Path,
    registry_dir: Path,
    cdi_dir: Path,
    nvidia_ctk: str,
    mig_control: MigControl | None = None,
) -> DraSettings:
    """The DRA driver's settings, reading claims and writing slices through the official client."""
    from gpufleet.agent.dra.toolkit import common_edits
    from gpufleet.kube.client import KubeTransport
    from gpufleet.kube.dra_node import claim_reader, slice_publisher

    api = KubeTransport.from_environment(kubeconfig=kubeconfig)
    return DraSettings(
        read_claim=claim_reader(api),
        publish=slice_publisher(api),
        plugins_dir=plugins_dir,
        registry_dir=registry_dir,
        cdi_dir=cdi_dir,
        common_edits=common_edits(nvidia_ctk),
        mig_control=mig_control,
    )


def _dra_slices_yaml(node: NodeInfo, node_name: str) -> str:
    import yaml

    slices = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": slice_name(node_name, index)},
            "spec": spec.to_dict(),
        }
        for index, spec in enumerate(node_slice_specs(node, node_name))
    ]
    return yaml.safe_dump_all(slices, sort_keys=False)


class PoolSharing:
    """Applies what the Node's labels select from its pool's sharing ConfigMap over the local config
    (`--config` or the defaults), as the GPU Operator's config-manager does for NVIDIA's plugin.

    No label: the local config. An entry whose ConfigMap or key is missing is pending, not wrong
    (the operator relabels the pool's nodes around its writes of the ConfigMap), and only that entry:
    a missing device-plugin entry leaves the device plugin config in force; a missing mig-parted entry
    means no MIG check and no MIG Event until it appears; the other entry, when there, is applied
    (so a label gpufleet did not set, such as `nvidia.com/mig.config=all-disabled`, cannot hold back
    the pool's time-slicing). The watcher reads the Node again soon, says when an entry stays missing,
    and passes on no selection in which nothing can be applied. A selection that cannot be applied (a
    field refused, not YAML, a config that does not fit the node's GPUs) is refused whole: the error,
    naming the ConfigMap, key and field, is logged and reported as a Warning Event on the Node, and the
    config in force stays. A mig-parted entry (`nvidia.com/mig.config`) is checked against the node
    and compared with the MIG layout NVML reports (`MigLayoutPending` / `MigLayoutInPlace`); the GPU
    Operator's MIG manager, not the agent, creates the instances. Flags `pinned` on the command line
    or in the environment (`--mig-strategy`, MIG_STRATEGY) win over an entry's `flags`, as they win
    over the local file: `base` has them already.
    """

    def __init__(
        self,
        agent: Agent,
        base: AgentConfig,
        local: str,
        report: Reporter | None = None,
        *,
        pinned: Mapping[str, Any] | None = None,
    ) -> None:
        self.agent = agent
        self.base = base
        self.local = local
        self.report: Reporter = report or _no_report
        self.pinned = dict(pinned or {})

    def __call__(self, selection: NodeSharingConfig | None) -> None:
        if selection is not None and selection.missing:
            log.info("sharing config pending, what is missing waits: %s", "; ".join(selection.missing))
            if selection.wholly_pending:
                return
        entry = selection.device_plugin if selection is not None else None
        waits = entry is not None and entry.text is None  # the device plugin config in force stays
        try:
            wanted = None if waits else self.wanted(selection)
            pending = self.mig_pending(selection)
            changed = wanted is not None and self.agent.apply_config(wanted[0], where=wanted[1])
        except ValidationError as exc:
            log.error("sharing config refused, the one in force stays: %s", exc)
            self.report("SharingConfigInvalid", f"{exc}; the config in force stays", warning=True)
            return
        if changed and wanted is not None:
            resources = ", ".join(f"{r.name}: {len(r.devices)}" for r in self.agent.resources) or "none"
            self.report("SharingConfigApplied", f"device plugin config from {wanted[1]}: {resources}")
        # A missing mig-parted entry: nothing to check the node against until it appears.
        if selection is not None and selection.mig is not None and selection.mig.text is not None:
            mig_where = selection.mig.where
            if pending:
                message = (
                    f"{mig_where}: not in place on {'; '.join(pending)}. The GPU Operator's MIG manager "
                    "applies it; the agent advertises a changed MIG layout once restarted"
                )
                log.warning("%s", message)
                self.report("MigLayoutPending", message, warning=True)
            else:
                log.info("%s: every GPU has its MIG layout", mig_where)
                self.report("MigLayoutInPlace", f"{mig_where}: every GPU has its MIG layout")

    def mig_pending(self, selection: NodeSharingConfig | None) -> list[str]:
        """The GPUs whose MIG layout is not the selected mig-parted entry's yet; ValidationError for
        an entry that cannot be applied to this node."""
        entry = selection.mig if selection is not None else None
        if entry is None or entry.text is None:
            return []
        return migparted.check(entry.text, entry.key, self.agent.node, where=entry.where)

    def wanted(self, selection: NodeSharingConfig | None) -> tuple[AgentConfig, str]:
        if selection is None:
            return self.base, self.local
        if selection.device_plugin is None:
            return self.base, f"{self.local} (ConfigMap {selection.config_map} has no device plugin entry)"
        entry = selection.device_plugin
        assert entry.text is not None  # a missing entry waits (`__call__`), it is never applied
        config = overlay_named_config(self.base, entry.text, where=entry.where)
        return self.pin(config, entry.where), entry.where

    def pin(self, config: AgentConfig, where: str) -> AgentConfig:
        """`config` with the pinned flags put back over what the entry set, saying so when it differed."""
        pinned = with_flags(config, self.pinned)
        if pinned.flags.mig_strategy != config.flags.mig_strategy:
            log.warning(
                "%s: flags.migStrategy %r is overridden by %s %r",
                where,
                config.flags.mig_strategy,
                MIG_STRATEGY_SOURCE,
                pinned.flags.mig_strategy,
            )
        return pinned


def _follow_sharing_config(
    agent: Agent,
    base: AgentConfig,
    path: Path | None,
    pinned: Mapping[str, Any],
    namespace: str,
    resync: float,
    done: threading.Event,
) -> SharingConfigWatcher | None:
    """Reads the Node's selection once (so the plugins first register with it), then follows it."""
    from gpufleet.kube.client import KubeTransport

    local = f"local config {path}" if path is not None else "the default config"
    try:
        api = KubeTransport.from_environment()
    except Exception as exc:  # no service account and no kubeconfig: nothing to follow
        log.error(
            "node %s: no API access, so no sharing config to follow (%s); %s", agent.node_name, exc, local
        )
        return None
    apply = PoolSharing(agent, base, local, pinned=pinned)
    watcher = SharingConfigWatcher(api, agent.node_name, namespace, apply, resync=resync)
    apply.report = watcher.report
    try:
        watcher.poll()
    except Exception as exc:  # the API server away at start: the local config until it answers
        log.warning("node %s: sharing config not read yet (%s); %s for now", agent.node_name, exc, local)
    watcher.start(done)
    return watcher


def _no_report(reason: str, message: str, *, warning: bool = False) -> None:
    pass


@contextmanager
def _naming_the_config(config: Path | None, pinned: Mapping[str, Any]) -> Iterator[None]:
    """Errors where the config does not fit this node (MPS on MIG-mode GPUs, a sharing entry for a
    resource the node lacks) name the config file too, as errors found while reading it do; a MIG
    strategy that does not fit names the option it came from when it was not the file's."""
    try:
        yield
    except ValidationError as exc:
        if exc.obj is not None:
            raise
        if exc.field == "flags.migStrategy" and "mig_strategy" in pinned:
            raise ValidationError(exc.detail, obj=MIG_STRATEGY_SOURCE) from exc
        if config is None:
            raise
        raise ValidationError(exc.detail, obj=str(config), field=exc.field) from exc


class _Collect(logging.Handler):
    """Keeps the warnings logged while the config loads, so inspect can show them with its output."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _load_config_collecting(config: Path | None) -> tuple[AgentConfig, list[str]]:
    collect = _Collect()
    config_log = logging.getLogger(load_config.__module__)
    config_log.addHandler(collect)
    try:
        return load_config(config, env=os.environ), collect.messages
    finally:
        config_log.removeHandler(collect)


@app.command()
def inspect(
    profile: str = typer.Option(None, "--profile", help=_PROFILE_HELP.format(", ".join(bundled_profiles()))),
    config: Path = typer.Option(None, "--config", help="config file in the NVIDIA device plugin's format"),
    mig_strategy: MigStrategy = typer.Option(
        None, "--mig-strategy", envvar="MIG_STRATEGY", case_sensitive=False, help=_MIG_STRATEGY_HELP
    ),
    as_json: bool = typer.Option(False, "--json", help="one JSON object: node, labels, resources"),
    record: Path = typer.Option(None, "--record", help="write what was discovered as a node profile JSON"),
    dra: bool = typer.Option(
        False, "--dra", help="print the ResourceSlices `gpufleet agent --dra` would publish (YAML), no more"
    ),
    node_name: str = typer.Option(
        None, "--node-name", envvar="NODE_NAME", help="with --dra: the node they are for (default: hostname)"
    ),
) -> None:
    """Prints what discovery found, the labels and the devices the agent would advertise."""
    pinned = _pinned(mig_strategy)
    cfg, warnings = _load_config_collecting(config)
    cfg = with_flags(cfg, pinned)
    backend = open_backend(profile)
    try:
        node = backend.discover()
        with _naming_the_config(config, pinned):
            resources = build_resources(node, cfg)
        labels = gfd_labels(node, cfg, resources)
        if record is not None:
            readings = {uuid: backend.telemetry(uuid) for uuid in uuids(node)}
            profile_json = node_to_json(node, telemetry=readings)
            source = "real NVML" if isinstance(backend, RealNvml) else f"profile {profile}"
            profile_json["description"] = (
                f"recorded by gpufleet agent inspect from {source} on {node.hostname}"
            )
            record.write_text(json.dumps(profile_json, indent=1) + "\n")
    finally:
        backend.close()
    if dra:
        typer.echo(_dra_slices_yaml(node, node_name or node.hostname), nl=False)
        return
    advertised = device_ids(resources)
    if as_json:
        typer.echo(
            json.dumps(
                {"node": node_to_json(node), "labels": labels, "resources": advertised, "warnings": warnings},
                indent=1,
            )
        )
        return
    # Piped output gets room for full UUIDs instead of an 80-column wrap.
    console = Console(width=None if sys.stdout.isatty() else 200, emoji=False)
    console.print(
        f"[bold]{node.hostname}[/] ({node.machine}): driver {node.driver_version}, "
        f"CUDA {node.cuda_version[0]}.{node.cuda_version[1]}, {len(node.gpus)} GPUs, "
        f"NVLink domains {node.nvlink_domains()}"
    )
    gpus = Table("index", "UUID", "model", "memory MiB", "PCI bus", "NUMA", "CC", "MIG", "NVLinks")
    for gpu in node.gpus:
        links = (
            f"{gpu.nvlink_switch_links} to NVSwitch"
            if gpu.nvlink_switch_links
            else (", ".join(f"{n} to {p}" for p, n in sorted(gpu.nvlink_peers.items())) or "-")
        )
        mig_text = (
            ", ".join(m.profile for m in gpu.mig_devices)
            if gpu.mig_enabled
            else ("capable" if gpu.mig_capable else "-")
        )
        gpus.add_row(
            str(gpu.index), gpu.uuid, gpu.name, str(gpu.memory_mib), gpu.pci_bus_id,
            "-" if gpu.numa_node is None else str(gpu.numa_node),
            f"{gpu.compute_capability[0]}.{gpu.compute_capability[1]}", mig_text, links,
        )  # fmt: skip
    console.print(gpus)
    label_table = Table("label", "value")
    for key, value in sorted(labels.items()):
        label_table.add_row(key, value)
    console.print(label_table)
    res_table = Table("resource", "devices", "IDs")
    for name, ids in advertised.items():
        shown = ", ".join(ids[:4]) + (f", ... ({len(ids) - 4} more)" if len(ids) > 4 else "")
        res_table.add_row(name, str(len(ids)), shown)
    console.print(res_table)
    for warning in warnings:
        console.print(f"[yellow]warning:[/] {warning}", markup=True, highlight=False)
