"""`gpufleet up --demo --clusters 3`: the manager plane and three worker planes the command wires, driven
on a virtual clock. The demo's TrainingJobs and InferenceServices, applied to the manager only, run in
workers and their status shows in the manager; the workers report their capacity into their Clusters."""

from __future__ import annotations

import threading
from pathlib import Path

from gpufleet.api import Cluster
from gpufleet.api.inference import InferenceService
from gpufleet.api.secret import SYSTEM_NAMESPACE, Secret
from gpufleet.api.training import TrainingJob
from gpufleet.cli.up import demo_objects
from gpufleet.cli.up_clusters import build, shut_down
from gpufleet.federation.join import MANAGER_SECRET
from gpufleet.federation.link import CLUSTER, MANAGED_BY
from gpufleet.scheduler.config import SchedulerConfig
from gpufleet.twin.clock import VirtualClock


def test_demo_over_three_clusters(tmp_path: Path) -> None:
    clock = VirtualClock()
    federation = build(
        tmp_path, demo_objects(), clock=clock, config=SchedulerConfig(), clusters=3, host="127.0.0.1", port=0
    )
    stop = threading.Event()
    for plane in federation.planes:  # the APIs serve; the runtimes are stepped here, on the virtual clock
        thread = threading.Thread(target=plane.server.run, daemon=True)
        thread.start()
        plane.threads.append(thread)
    try:
        for plane in federation.planes:
            assert plane.server.started.wait(30)
        manager = federation.manager
        assert {s.name for s in manager.store.list(InferenceService)} == {"chat", "embed"}
        assert all(not list(w.store.list(InferenceService)) for w in federation.workers), "dispatched later"
        assert {j.name for j in manager.store.list(TrainingJob)} == {
            "llm-pretrain",
            "finetune-7b",
            "vision-sweep",
            "moe-ablation",
        }
        for _ in range(45):  # a service replica is ready once its model has loaded (about 30 s)
            clock.advance_to(clock.now() + 1)
            for plane in federation.planes:
                assert plane.runtime is not None
                plane.runtime.settle()

        clusters = {c.name: c for c in manager.store.list(Cluster)}
        assert sorted(clusters) == ["w1", "w2", "w3"]
        assert all(c.status.capacity["H100-80GB"].gpus == 256 for c in clusters.values())
        job = manager.store.get(TrainingJob, "llm-pretrain", "team-a")
        held = job.metadata.annotations[CLUSTER]
        worker = next(w for w in federation.workers if w.name == held)
        copy = worker.store.get(TrainingJob, "llm-pretrain", "team-a")
        assert copy.metadata.annotations[MANAGED_BY] == "manager"
        assert copy.status.phase == "Running"
        assert job.status.phase == "Running" and job.status.nodes == copy.status.nodes
        assert (
            sum(1 for w in federation.workers for j in w.store.list(TrainingJob) if j.name == job.name) == 1
        )
        # Each side holds a federation token of the other, not its admin token (`server.federation_access`).
        into_worker = manager.store.get(Secret, f"cluster-{held}-token", SYSTEM_NAMESPACE).value("token")
        assert into_worker != worker.tokens.admin_token
        assert worker.tokens.authenticate(f"Bearer {into_worker}").role == "federation-manager"
        into_manager = worker.store.get(Secret, MANAGER_SECRET, SYSTEM_NAMESPACE).value("token")
        assert manager.tokens.authenticate(f"Bearer {into_manager}").cluster == held
        chat = manager.store.get(InferenceService, "chat", "serving")
        holder = next(w for w in federation.workers if w.name == chat.metadata.annotations[CLUSTER])
        served = holder.store.get(InferenceService, "chat", "serving")
        assert served.metadata.annotations[MANAGED_BY] == "manager" and served.status.ready_replicas >= 2
        assert chat.status.phase == "Running" and chat.status.ready_replicas == served.status.ready_replicas
        assert (
            sum(1 for w in federation.workers for s in w.store.list(InferenceService) if s.name == "chat")
            == 1
        )
    finally:
        for plane in federation.planes:
            plane.server.stop()
        shut_down(federation, stop)
