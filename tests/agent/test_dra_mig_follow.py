"""The agent's exporter and health checks follow the MIG instances its DRA driver creates and destroys
(dynamic MIG): a new instance is scraped and an XID naming its GPU instance marks it alone; once it is
destroyed it is neither scraped nor kept unhealthy."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.agent.config import AgentConfig
from gpufleet.agent.dra.driver import ClaimRef
from gpufleet.agent.dra.migcaps import MigCaps
from gpufleet.agent.dra.server import DraSettings
from gpufleet.agent.exporter import render
from gpufleet.agent.nvml import EVENT_XID_CRITICAL, DeviceEvent, RealNvml, RecordedNvml
from gpufleet.agent.runtime import Agent
from gpufleet.api.dra import ResourceClaim

from .fakemig import FakeMigPynvml
from .test_dra_kubelet import NODE, allocated
from .test_exporter import _families

CLAIM = ClaimRef("team-a", "uid-1", "small")


@pytest.fixture
def agent(short_dir: Path, a100_mig: RecordedNvml) -> Iterator[tuple[Agent, FakeMigPynvml]]:
    fake = FakeMigPynvml(a100_mig.discover())
    backend = RealNvml(fake)
    claims: dict[tuple[str, str], ResourceClaim] = {}
    settings = DraSettings(
        read_claim=lambda ns, name: claims.get((ns, name)),
        publish=None,
        plugins_dir=short_dir / "plugins",
        registry_dir=short_dir / "registry",
        cdi_dir=short_dir / "cdi",
        mig_control=backend.mig_control(),
    )
    made = Agent(
        backend,
        AgentConfig(),
        node_name=NODE,
        plugin_dir=short_dir / "device-plugins",
        metrics_port=None,
        pod_resources_socket=short_dir / "no-kubelet.sock",
        dra=settings,
    )
    assert made.dra is not None
    # the driver's capability table: GPU 0's GI g has minor 10g, its CI 0 minor 10g + 1
    lines = [f"gpu0/gi{g}/access {10 * g}\ngpu0/gi{g}/ci0/access {10 * g + 1}" for g in range(1, 9)]
    (short_dir / "mig-minors").write_text("\n".join(lines) + "\n")
    (short_dir / "devices").write_text("Character devices:\n508 nvidia-caps\n")
    made.dra.driver.mig_caps = MigCaps(
        mig_minors=short_dir / "mig-minors", proc_devices=short_dir / "devices"
    )
    claims["team-a", "small"] = allocated("small", CLAIM.uid, "gpu-0-mig-9-4-4")
    yield made, fake


def scraped_mig(agent: Agent) -> set[tuple[str, str]]:
    """(parent GPU UUID, GPU instance id) of every MIG device the exporter reports memory of."""
    series = _families(render([agent.collector]).decode())
    return {(s["UUID"], s["GPU_I_ID"]) for s, _ in series["DCGM_FI_DEV_FB_USED"] if "GPU_I_ID" in s}


def test_dra_dynamic_mig_exporter_and_health_follow_created_and_destroyed_instances(
    agent: tuple[Agent, FakeMigPynvml],
) -> None:
    running, fake = agent
    assert running.dra is not None
    gpu0 = fake.node.gpus[0].uuid
    # the driver destroyed mig-parted's layout at start; the exporter no longer reports it
    assert scraped_mig(running) == set()

    running.dra.driver.prepare(CLAIM)
    (instance,) = fake.node.gpus[0].mig_devices
    assert scraped_mig(running) == {(gpu0, str(instance.gi_id))}
    # an XID naming the new GPU instance marks that instance, not the whole GPU
    running.monitor.handle(DeviceEvent(gpu0, EVENT_XID_CRITICAL, 79, gi_id=instance.gi_id, ci_id=0))
    assert set(running.health.unhealthy()) == {instance.uuid}

    running.dra.driver.unprepare(CLAIM)
    assert fake.node.gpus[0].mig_devices == ()
    assert scraped_mig(running) == set()
    # the destroyed instance's UUID is never used again: its fault is not kept
    assert running.health.unhealthy() == {}
