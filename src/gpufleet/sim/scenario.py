"""Scenario files: load and check them, build the world they describe, run the scheduler, compare.

The scheduler run here is the scheduling core itself (`gpufleet.scheduler.cycle.Scheduler`), the same
one the control plane uses; this module only builds its inputs and applies its decisions in memory.

Loading is all-or-nothing: every file is parsed and every reference checked (queues, nodes, workload
names, topology levels, MIG layouts) before any scenario runs, and an error names the file and field.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from gpufleet.api.docshape import check_shape
from gpufleet.api.documents import compose_documents, locate_error, read_text
from gpufleet.api.errors import GpuFleetError, ValidationError
from gpufleet.api.fields import DEFAULT_PRIORITY_CLASSES
from gpufleet.api.labels import CAPACITY_TYPE_LABEL
from gpufleet.api.quantity import cpu_milli, memory_mib
from gpufleet.api.scenario import RunningWorkload, Scenario, ScenarioNode, ScenarioQueue, ScenarioWorkload
from gpufleet.api.validation import parse_object
from gpufleet.fleet.node import NodeSpec, SharingMode
from gpufleet.fleet.request import PodRequest, Taint
from gpufleet.fleet.state import AllocationError, FleetState
from gpufleet.scheduler.cache import ClusterCache
from gpufleet.scheduler.config import FairSharingConfig, SchedulerConfig
from gpufleet.scheduler.cycle import CycleResult, Scheduler, apply_decisions
from gpufleet.scheduler.explain import Preempt
from gpufleet.scheduler.flavors import (
    Assignment,
    candidate_models,
    pinned,
    selects,
    usage_of,
)
from gpufleet.scheduler.placement.gpus import choose_gpus
from gpufleet.scheduler.placement.place import place_workload
from gpufleet.scheduler.placement.policies import get_policy
from gpufleet.scheduler.policy_choice import check_policy
from gpufleet.scheduler.priority import PriorityClasses
from gpufleet.scheduler.queueing import (
    QueueSettings,
    UsageHistory,
    user_key,
)
from gpufleet.scheduler.quota import FlavorLimits, QuotaNode, QuotaTree
from gpufleet.scheduler.settings import queue_settings
from gpufleet.scheduler.statement import Statement
from gpufleet.scheduler.workload import PodSet, TopologyRequest, Workload

START = 1_000_000.0
"""The scenario clock at the first cycle; running workloads started `admittedSecondsAgo` before it."""

DEFAULT_QUEUE = "default"


@dataclass(frozen=True, slots=True)
class LoadedScenario:
    source: str
    index: int
    scenario: Scenario

    @property
    def name(self) -> str:
        return self.scenario.metadata.name


@dataclass(slots=True)
class ScenarioOutcome:
    name: str
    source: str
    passed: bool
    failures: list[str] = field(default_factory=list)
    cycles: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "file": self.source, "passed": self.passed, "failures": self.failures}


# ---------------------------------------------------------------------------- loading
def scenario_files(paths: Iterable[str | Path]) -> list[Path]:
    """Files named on the command line, directories expanded to their YAML files (sorted)."""
    out: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            out.extend(sorted(p for p in path.rglob("*") if p.suffix in (".yaml", ".yml")))
        elif path.exists():
            out.append(path)
        else:
            raise ValidationError("no such file or directory", obj=str(path))
    return out


def load_scenarios(paths: Iterable[str | Path]) -> list[LoadedScenario]:
    """Every scenario of every file, each checked completely; raises on the first problem."""
    loaded: list[LoadedScenario] = []
    for path in scenario_files(paths):
        loaded.extend(load_file(path))
    names: dict[str, str] = {}
    for item in loaded:
        if item.name in names:
            raise ValidationError(
                f"scenario name {item.name!r} is also used in {names[item.name]}",
                obj=item.source,
                field="metadata.name",
            )
        names[item.name] = item.source
    return loaded


def load_file(path: Path) -> list[LoadedScenario]:
    """Every scenario of one file; an error about a field names the file and the field's line."""
    source = str(path)
    text = read_text(path)
    documents = compose_documents(text, source)
    out = []
    for index, (document, node) in enumerate(documents, start=1):
        if document is None:
            continue
        out.append(load_document(document, source=source, index=index, node=node))
    return out


def load_document(
    document: Any, *, source: str, index: int = 1, node: yaml.Node | None = None
) -> LoadedScenario:
    """One scenario from its parsed YAML, validated in shape and in every reference.

    `node` is the document's composed YAML (from `compose_documents`): with it, errors give the line.
    """
    try:
        check_shape(document, f"document {index}")
        table = _priority_table(document)
        obj = parse_object(document, priority_classes=table, where=f"document {index}")
        if not isinstance(obj, Scenario):
            raise ValidationError(f"expected kind Scenario, got {obj.kind}", obj=source, field="kind")
        _check_references(obj, source)
        build_world(obj, source=source)  # fleet and tree errors surface now, before anything runs
    except ValidationError as exc:
        if exc.obj is None:  # about the document as a whole: the message says which document
            raise ValidationError(str(exc), obj=source) from None
        raise locate_error(exc, source=source, node=node) from None
    return LoadedScenario(source, index, obj)


def _priority_table(document: Any) -> dict[str, int]:
    try:
        table = document["spec"]["scheduler"]["priorityClasses"]
    except (KeyError, TypeError):
        return dict(DEFAULT_PRIORITY_CLASSES)
    return dict(table) if isinstance(table, dict) else dict(DEFAULT_PRIORITY_CLASSES)


def _check_references(scenario: Scenario, source: str) -> None:
    spec = scenario.spec

    def fail(path: str, message: str) -> None:
        raise ValidationError(message, obj=source, field=path)

    node_names: set[str] = set()
    for i, node in enumerate(spec.nodes):
        for name in node.node_names():
            if name in node_names:
                fail(f"spec.nodes[{i}].name", f"node {name!r} is declared twice")
            node_names.add(name)
    queue_names = [q.name for q in spec.queues] or [DEFAULT_QUEUE]
    seen: set[str] = set()
    for i, queue in enumerate(spec.queues):
        if queue.name in seen:
            fail(f"spec.queues[{i}].name", f"queue {queue.name!r} is declared twice")
        seen.add(queue.name)
    for i, queue in enumerate(spec.queues):
        if queue.parent is not None and queue.parent not in seen:
            fail(f"spec.queues[{i}].parent", f"unknown queue {queue.parent!r}")
    parents = {q.parent for q in spec.queues if q.parent is not None}
    levels = {"nvlink", "host", *spec.topology_levels}
    workload_names: set[str] = set()
    groups: list[tuple[str, Sequence[ScenarioWorkload]]] = [
        ("running", spec.running),
        ("submit", spec.submit),
    ]
    for group, items in groups:
        for i, workload in enumerate(items):
            where = f"spec.{group}[{i}]"
            if workload.name in workload_names:
                fail(f"{where}.name", f"workload {workload.name!r} is declared twice")
            workload_names.add(workload.name)
            if workload.queue not in queue_names:
                fail(f"{where}.queue", f"unknown queue {workload.queue!r}")
            if workload.queue in parents:
                fail(f"{where}.queue", f"queue {workload.queue!r} is not a leaf; submit to a leaf queue")
            for part in ("required", "preferred"):
                level = getattr(workload.topology, part)
                if level is not None and level not in levels:
                    fail(
                        f"{where}.topology.{part}",
                        f"unknown topology level {level!r} (known: {sorted(levels)})",
                    )
            if isinstance(workload, RunningWorkload) and workload.nodes is not None:
                pods = sum(ps.count for ps in workload.pod_sets)
                if len(workload.nodes) != pods:
                    fail(f"{where}.nodes", f"gives {len(workload.nodes)} nodes for {pods} pods")
                for j, node_name in enumerate(workload.nodes):
                    if node_name not in node_names:
                        fail(f"{where}.nodes[{j}]", f"unknown node {node_name!r}")
    expect = spec.expect
    for part in ("admitted", "preempted", "pending", "same_domain", "nodes", "pod_counts", "preempted_by"):
        value = getattr(expect, part)
        if value is None:
            continue
        yaml_part = {
            "same_domain": "sameDomain",
            "pod_counts": "podCounts",
            "preempted_by": "preemptedBy",
        }.get(part, part)
        for name in value:
            if name not in workload_names:
                fail(f"spec.expect.{yaml_part}", f"unknown workload {name!r}")
    for name, level in (expect.same_domain or {}).items():
        if level not in levels:
            fail(f"spec.expect.sameDomain.{name}", f"unknown topology level {level!r}")
    for victim, preemptor in (expect.preempted_by or {}).items():
        if preemptor not in workload_names:
            fail(f"spec.expect.preemptedBy.{victim}", f"unknown workload {preemptor!r}")


# ---------------------------------------------------------------------------- building
@dataclass(slots=True)
class World:
    """What a scenario describes, as the scheduler's inputs."""

    cache: ClusterCache
    config: SchedulerConfig
    submit: list[Workload]
    now: float
    grace_cycles: int = 0
    """Cycles a pod given up goes on holding its node's resources (0: gone at once)."""


def build_world(scenario: Scenario, *, source: str) -> World:
    spec = scenario.spec
    sched = spec.scheduler
    fair = sched.fair_sharing
    table = sched.priority_classes or dict(DEFAULT_PRIORITY_CLASSES)
    config = SchedulerConfig(
        # Only what the scenario says: the built-in per-class defaults apply where it says nothing.
        placement=sched.placement or None,
        placement_by_class={str(k): v for k, v in sched.placement_by_class.items()},
        priority_classes=table,
        fair_sharing=FairSharingConfig(fair.half_life_seconds, fair.history_weight)
        if fair
        else FairSharingConfig(),
        seed=sched.seed,
    )
    _check_policies(config, source)
    fleet = _build_fleet(spec.topology_levels, spec.nodes, source)
    tree, settings = _build_queues(spec.queues, source)
    now = START + 0.001 * len(spec.submit)
    history = UsageHistory(config.fair_sharing.half_life_seconds)
    cache = ClusterCache(fleet=fleet, tree=tree, settings=settings, history=history)
    classes = PriorityClasses(table)
    for queue in spec.queues:
        for flavor, gpus in queue.historical_usage.items():
            history.seed(queue.name, flavor, gpus * 1000, 0.0, now)
        for user, flavors in queue.user_historical_usage.items():
            history.seed(user_key(queue.name, user), "*", sum(flavors.values()) * 1000, 0.0, now)
    for i, running in enumerate(spec.running):
        workload = _workload(running, classes, source, f"spec.running[{i}]")
        started = now - running.admitted_seconds_ago
        ckpt = (
            None if running.last_checkpoint_seconds_ago is None else now - running.last_checkpoint_seconds_ago
        )
        submitted = (
            started - 1.0 if running.submitted_seconds_ago is None else now - running.submitted_seconds_ago
        )
        workload = dataclasses.replace(workload, submitted_at=submitted, last_checkpoint_at=ckpt)
        _admit_running(cache, workload, running, started, source, f"spec.running[{i}]", config)
    submit = []
    for i, item in enumerate(spec.submit):
        workload = _workload(item, classes, source, f"spec.submit[{i}]")
        submitted = (
            START + 0.001 * i if item.submitted_seconds_ago is None else now - item.submitted_seconds_ago
        )
        submit.append(dataclasses.replace(workload, submitted_at=submitted))
    cache.graceful_evictions = spec.termination_grace_cycles > 0
    return World(cache, config, submit, now, spec.termination_grace_cycles)


def _build_fleet(levels: list[str], nodes: list[ScenarioNode], source: str) -> FleetState:
    try:
        fleet = FleetState(levels)
    except ValidationError as exc:
        raise ValidationError(exc.detail, obj=source, field="spec.topologyLevels") from None
    for i, node in enumerate(nodes):
        sharing, replicas, layouts = _sharing(node, source, i)
        for name in node.node_names():
            spec = NodeSpec(
                name=name,
                gpu_model=node.gpu_model,
                gpus=node.gpus,
                cpu_milli=cpu_milli(node.cpu),
                memory_mib=memory_mib(node.memory),
                labels=_labels(node),
                taints=tuple(Taint(t.key, t.value, t.effect) for t in node.taints),
                unschedulable=node.unschedulable,
                nvlink_domains=None
                if node.nvlink_domains is None
                else tuple(tuple(d) for d in node.nvlink_domains),
                sharing=sharing,
                replicas=replicas,
                mig_layouts=layouts,
                unhealthy_gpus=tuple(node.unhealthy_gpus),
                driver_version=node.driver_version or "",
            )
            try:
                fleet.add_node(spec)
            except GpuFleetError as exc:
                raise ValidationError(exc.detail, obj=source, field=f"spec.nodes[{i}]") from None
    return fleet


def _sharing(node: ScenarioNode, source: str, i: int) -> tuple[SharingMode, int, dict[int, tuple[str, ...]]]:
    sharing = node.sharing
    if sharing.time_slicing is not None:
        return SharingMode.TIME_SLICING, sharing.time_slicing.replicas, {}
    if sharing.mps is not None:
        return SharingMode.MPS, sharing.mps.replicas, {}
    if sharing.mig is not None:
        layouts: dict[int, tuple[str, ...]] = {}
        for gpu in range(node.gpus):
            layout = sharing.mig.get(str(gpu), sharing.mig.get("*"))
            if layout is not None:
                layouts[gpu] = tuple(layout)
        for key in sharing.mig:
            if key != "*" and int(key) >= node.gpus:
                raise ValidationError(
                    f"the node has no GPU {key}", obj=source, field=f"spec.nodes[{i}].sharing.mig"
                )
        return SharingMode.MIG, 1, layouts
    return SharingMode.EXCLUSIVE, 1, {}


def _milli(gpus: float | None) -> int | None:
    return None if gpus is None else round(gpus * 1000)


def _build_queues(queues: list[ScenarioQueue], source: str) -> tuple[QuotaTree, dict[str, QueueSettings]]:
    if not queues:
        tree = QuotaTree([QuotaNode(DEFAULT_QUEUE, unlimited=True)])
        return tree, {DEFAULT_QUEUE: QueueSettings(DEFAULT_QUEUE)}
    nodes = []
    settings = {}
    for queue in queues:
        quotas = {
            flavor: FlavorLimits(round(q.nominal * 1000), _milli(q.borrowing_limit), _milli(q.lending_limit))
            for flavor, q in queue.ordered_quotas()  # the order flavors are tried in
        }
        nodes.append(QuotaNode(queue.name, queue.parent, quotas))
        settings[queue.name] = queue_settings(queue.name, queue)
    try:
        tree = QuotaTree(nodes)
    except ValidationError as exc:
        index = next((i for i, q in enumerate(queues) if exc.obj == f"Queue {q.name}"), 0)
        raise ValidationError(exc.detail, obj=source, field=f"spec.queues[{index}].{exc.field}") from None
    return tree, settings


def _labels(node: ScenarioNode) -> dict[str, str]:
    labels = dict(node.labels)
    if node.capacity_type is not None:
        labels[CAPACITY_TYPE_LABEL] = node.capacity_type
    return labels


def _check_policies(config: SchedulerConfig, source: str) -> None:
    """Every policy the scenario names exists and can run without further settings."""
    named = [
        (f"spec.scheduler.placementByClass.{cls}", name) for cls, name in config.placement_by_class.items()
    ]
    if config.placement is not None:
        named.insert(0, ("spec.scheduler.placement", config.placement))
    for where, name in named:
        check_policy(name, field=where, obj=source)


def _workload(item: ScenarioWorkload, classes: PriorityClasses, source: str, where: str) -> Workload:
    if item.priority is not None:
        priority = item.priority
    else:
        try:
            priority = classes.value(item.priority_class)
        except ValidationError as exc:
            raise ValidationError(exc.detail, obj=source, field=f"{where}.priorityClass") from None
    pod_sets = []
    for j, ps in enumerate(item.pod_sets):
        try:
            request = PodRequest(
                cpu_milli=ps.cpu_milli,
                memory_mib=ps.memory_mib,
                gpus=ps.gpus or 0,
                gpu_milli=ps.gpu_milli or 0,
                mig=ps.mig,
                gpu_models=ps.gpu_models,
                cuda_version=ps.cuda,
            )
        except ValueError as exc:
            raise ValidationError(str(exc), obj=source, field=f"{where}.podSets[{j}]") from None
        pod_sets.append(PodSet(ps.name, ps.count, request, ps.min_count))
    try:
        return Workload(
            name=item.name,
            pod_sets=tuple(pod_sets),
            queue=item.queue,
            priority=priority,
            topology=TopologyRequest(item.topology.required, item.topology.preferred),
            preemptible=item.preemptible,
            user=item.user,
            workload_class=item.workload_class,
        )
    except ValidationError as exc:
        raise ValidationError(exc.detail, obj=source, field=f"{where}.podSets") from None


def _admit_running(
    cache: ClusterCache,
    workload: Workload,
    running: RunningWorkload,
    started: float,
    source: str,
    where: str,
    config: SchedulerConfig,
) -> None:
    """Admits a `running` workload as given: on its `nodes`, or where placement puts it."""
    node = cache.tree.nodes[workload.queue]
    models = candidate_models(
        workload, queue_flavors=list(node.quotas), fleet_models=cache.fleet.models, unlimited=node.unlimited
    )
    counts = tuple(ps.count for ps in workload.pod_sets)
    fleet = cache.fleet
    for model in models or [None]:
        statement = Statement(fleet)
        shaped = pinned(workload, model, counts)
        try:
            if running.nodes is not None:
                if model is not None and not all(_selected(fleet, model, n) for n in running.nodes):
                    statement.discard()
                    continue
                allocations = _allocate_on(statement, shaped, running.nodes)
            else:
                policy = get_policy(config.policy_for(workload.workload_class))
                result = place_workload(
                    fleet, shaped, policy=policy, rng=np.random.default_rng(0), statement=statement
                )
                if result.no_fit is not None:
                    statement.discard()
                    continue
                allocations = [fleet.allocations[p.pod] for p in result.placements]
        except (AllocationError, ValueError) as exc:
            statement.discard()
            raise ValidationError(
                f"cannot run {workload.name} there: {exc}", obj=source, field=f"{where}.nodes"
            ) from None
        statement.discard()
        assignment = Assignment(model, counts, usage_of(workload, model, counts))
        cache.admit(workload, assignment, allocations, now=started)
        return
    if running.nodes is not None:
        raise ValidationError(
            f"no flavor of queue {workload.queue} ({', '.join(str(m) for m in models)}) selects all of "
            f"{workload.name}'s nodes (GPU model and capacity type)",
            obj=source,
            field=f"{where}.nodes",
        )
    raise ValidationError(f"no room for running workload {workload.name}", obj=source, field=where)


def _selected(fleet: FleetState, flavor: str, node: str) -> bool:
    """Whether `flavor` selects the named node: its GPU model and, for a capacity-typed flavor, the node's
    capacity type label (decision 21: a running workload is charged to the first such flavor)."""
    spec = fleet.specs[fleet.row_of(node)]
    return selects(flavor, spec.gpu_model, spec.labels.get(CAPACITY_TYPE_LABEL))


def _allocate_on(statement: Statement, workload: Workload, nodes: Sequence[str]) -> list[Any]:
    fleet = statement.state
    allocations = []
    names = iter(nodes)
    for ps in workload.pod_sets:
        for index in range(ps.count):
            row = fleet.row_of(next(names))
            choice = choose_gpus(fleet, row, ps.request)
            alloc = statement.allocate(
                workload.pod_name(ps.name, index), row, ps.request, choice.gpus, mig_gpu=choice.mig_gpu
            )
            allocations.append(alloc)
    return allocations


# ---------------------------------------------------------------------------- running
@dataclass(slots=True)
class RunLog:
    cycles: int = 0
    preempted: dict[str, Preempt] = field(default_factory=dict)
    last: CycleResult | None = None
    converged: bool = False
    errors: dict[str, str] = field(default_factory=dict)
    """Workloads an attempt raised on (`CycleResult.errors`: a bug, no scenario's doing), with the error
    in words: the scenario fails on it whatever it expects."""


def run_world(world: World) -> RunLog:
    """Submits the arrivals and runs cycles until one changes nothing (or the cycle limit)."""
    cache = world.cache
    for workload in world.submit:
        cache.submit(workload)
    scheduler = Scheduler(world.config)
    log = RunLog()
    cycles_left: dict[str, int] = {}  # leaving pods -> cycles they still hold their resources
    for _ in range(world.config.max_cycles):
        terminating = bool(cache.leaving)
        result = scheduler.cycle(cache, now=world.now)
        log.cycles += 1
        log.last = result
        for name, error in result.errors.items():
            log.errors.setdefault(name, f"{type(error).__name__}: {error}")
        for preempt in result.preempted:
            if preempt.whole:
                log.preempted[preempt.victim] = preempt
        apply_decisions(cache, result, now=world.now)
        _terminate(cache, cycles_left, world.grace_cycles)
        if not result.changed and not terminating:  # pods still terminating may yet let more start
            log.converged = True
            break
    return log


def _terminate(cache: ClusterCache, cycles_left: dict[str, int], grace: int) -> None:
    """A cycle went by: pods given up go on holding their resources for the next `grace` cycles."""
    for name in sorted(cycles_left):
        cycles_left[name] -= 1
        if cycles_left[name] <= 0:
            del cycles_left[name]
            cache.gone(name)
    for name in cache.leaving - cycles_left.keys():
        cycles_left[name] = grace


def run_scenario(item: LoadedScenario) -> ScenarioOutcome:
    world = build_world(item.scenario, source=item.source)
    log = run_world(world)
    failures = check_expectations(item.scenario, world, log)
    return ScenarioOutcome(item.name, item.source, not failures, failures, log.cycles)


def check_expectations(scenario: Scenario, world: World, log: RunLog) -> list[str]:
    """Every way the run differs from `spec.expect`, in words; empty when the scenario passes."""
    expect = scenario.spec.expect
    cache = world.cache
    failures: list[str] = []
    if not log.converged:
        failures.append(f"no fixed point after {log.cycles} cycles (a preemption loop?)")
    for name, error in log.errors.items():
        failures.append(f"the scheduler raised on {name}: {error}")
    pending = log.last.pending if log.last is not None else {}
    for name in expect.admitted or []:
        if name not in cache.admitted:
            why = pending.get(name)
            detail = f": {why.reason.type}: {why.reason.message}" if why else ""
            failures.append(f"admitted: {name} is not admitted{detail}")
    if expect.preempted is not None:
        got = sorted(log.preempted)
        want = sorted(expect.preempted)
        if got != want:
            failures.append(f"preempted: want {want}, got {got}")
    for name, reason in (expect.pending or {}).items():
        if name in cache.admitted:
            failures.append(f"pending: {name} was admitted, want pending with {reason}")
            continue
        found = pending.get(name)
        got_type = found.reason.type if found else "no reason"
        if got_type != reason:
            message = f" ({found.reason.message})" if found else ""
            failures.append(f"pending: {name} has {got_type}{message}, want {reason}")
    for name, level in (expect.same_domain or {}).items():
        problem = _same_domain(world, name, level)
        if problem:
            failures.append(f"sameDomain: {name}: {problem}")
    for name, want_nodes in (expect.nodes or {}).items():
        got_nodes = _nodes_of(world, name)
        # Pods of a pod set are interchangeable: which of two tied nodes gets pod 0 is not a decision.
        if sorted(got_nodes) != sorted(want_nodes):
            failures.append(f"nodes: {name}: want {want_nodes}, got {got_nodes}")
    for name, count in (expect.pod_counts or {}).items():
        admitted = cache.admitted.get(name)
        got_count = len(admitted.pods) if admitted else 0
        if got_count != count:
            failures.append(f"podCounts: {name}: want {count}, got {got_count}")
    for victim, preemptor in (expect.preempted_by or {}).items():
        found_by = log.preempted.get(victim)
        got_by = found_by.preemptor if found_by else None
        if got_by != preemptor:
            failures.append(f"preemptedBy: {victim}: want {preemptor}, got {got_by}")
    try:
        cache.fleet.check_invariants()
    except AssertionError as exc:
        failures.append(f"fleet invariants broken: {exc}")
    return failures


def _pods_in_order(world: World, name: str) -> list[Any]:
    admitted = world.cache.admitted.get(name)
    if admitted is None:
        return []
    order = {ps.name: i for i, ps in enumerate(admitted.workload.pod_sets)}

    def key(pod: str) -> tuple[int, int]:
        _, pod_set, index = pod.rsplit("/", 2)
        return order[pod_set], int(index)

    return [admitted.pods[pod] for pod in sorted(admitted.pods, key=key)]


def _nodes_of(world: World, name: str) -> list[str]:
    fleet = world.cache.fleet
    return [fleet.names[alloc.node] for alloc in _pods_in_order(world, name)]


def _same_domain(world: World, name: str, level: str) -> str | None:
    allocations = _pods_in_order(world, name)
    if not allocations:
        return "is not admitted"
    fleet = world.cache.fleet
    if level in ("host", "nvlink"):
        rows = {a.node for a in allocations}
        if len(rows) > 1:
            return f"pods on {len(rows)} hosts"
        if level == "nvlink":
            row = allocations[0].node
            groups = {int(fleet.nvlink[row, gpu]) for a in allocations for gpu in a.gpus}
            if len(groups) > 1:
                return f"GPUs in {len(groups)} NVLink domains"
        return None
    level_no = fleet.levels.index(level)
    domains = {int(fleet.domain[level_no, a.node]) for a in allocations}
    if len(domains) > 1 or -1 in domains:
        return f"pods in {len(domains)} {level} domains"
    return None
