"""Leader election with a coordination.k8s.io/v1 Lease: many replicas, one active.

client-go's algorithm. A candidate takes the Lease when nobody holds it, or when the holder's record
has not changed for `lease_duration` seconds of the candidate's own clock (time observed locally,
never compared with the holder's timestamps, so clock skew between machines does not matter). Every
write carries the Lease's resourceVersion, so two candidates cannot both win: the second gets 409.
The leader renews every `retry_period`; if it has not renewed for `renew_deadline` it stops leading
before anyone else may start (renew_deadline < lease_duration). A leader that shuts down releases the
Lease, so its successor starts at once. Each change of holder, a take-over of a released Lease
included, counts one more `leaseTransitions`, as client-go counts them.

With the defaults (10 s lease, 7 s deadline, 2 s retry) a standby takes over at most about 12 s after
the leader dies.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gpufleet.kube.resources import LEASE
from gpufleet.kube.transport import ApiError, Json, Transport

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LeaseConfig:
    name: str
    namespace: str
    identity: str
    lease_duration: float = 10.0
    renew_deadline: float = 7.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError("leader election needs retry_period < renew_deadline < lease_duration")


def micro_time(moment: datetime) -> str:
    """Kubernetes' MicroTime form: RFC 3339 with microseconds, in UTC."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Takes and keeps one Lease for `config.identity`. `clock` is monotonic seconds, `now` wall time."""

    def __init__(
        self,
        transport: Transport,
        config: LeaseConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.config = config
        self._api = transport
        self._clock = clock
        self._now = now
        self._observed: Json | None = None  # the Lease's spec as last seen
        self._observed_at = 0.0
        self._renewed_at: float | None = None

    @property
    def is_leader(self) -> bool:
        """Whether this candidate holds the Lease and renewed it within the renew deadline."""
        return (
            self._renewed_at is not None
            and self._clock() - self._renewed_at < self.config.renew_deadline
            and (self._observed or {}).get("holderIdentity") == self.config.identity
        )

    @property
    def holder(self) -> str | None:
        return (self._observed or {}).get("holderIdentity") or None

    def try_acquire_or_renew(self) -> bool:
        """One attempt; True when this candidate holds the Lease afterwards."""
        cfg = self.config
        path = LEASE.item(cfg.name, cfg.namespace)
        try:
            lease = self._api.request("GET", path)
        except ApiError as exc:
            if exc.status != 404:
                log.warning("lease %s/%s: %s", cfg.namespace, cfg.name, exc)
                return False
            return self._create()
        spec = lease.get("spec", {})
        if spec != self._observed:
            self._observed, self._observed_at = spec, self._clock()
        holder = spec.get("holderIdentity") or ""
        mine = holder == cfg.identity
        duration = float(spec.get("leaseDurationSeconds") or cfg.lease_duration)
        if holder and not mine and self._clock() < self._observed_at + duration:
            return False  # someone else holds a live lease
        stamp = micro_time(self._now())
        new_spec = {
            **spec,
            "holderIdentity": cfg.identity,
            "leaseDurationSeconds": int(cfg.lease_duration),
            "renewTime": stamp,
        }
        if not mine:
            # As client-go counts: every change of holder is a transition, a take-over of a released
            # Lease (no holder) included; only the holder renewing its own keeps the count.
            new_spec["acquireTime"] = stamp
            new_spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        body = {**lease, "spec": new_spec}
        try:
            written = self._api.request("PUT", path, body=body)
        except ApiError as exc:
            if exc.status != 409:
                log.warning("lease %s/%s: %s", cfg.namespace, cfg.name, exc)
            return False
        return self._won(written)

    def release(self) -> None:
        """Gives the Lease up (if held) so a standby need not wait for it to expire."""
        if not self.is_leader:
            return
        cfg = self.config
        path = LEASE.item(cfg.name, cfg.namespace)
        try:
            lease = self._api.request("GET", path)
            if lease.get("spec", {}).get("holderIdentity") != cfg.identity:
                return
            spec = {**lease["spec"], "holderIdentity": "", "leaseDurationSeconds": 1,
                    "renewTime": micro_time(self._now())}  # fmt: skip
            self._api.request("PUT", path, body={**lease, "spec": spec})
        except ApiError as exc:
            log.warning("lease %s/%s: release failed: %s", cfg.namespace, cfg.name, exc)
        finally:
            self._renewed_at = None

    def run(
        self,
        stop: threading.Event,
        *,
        on_started: Callable[[threading.Event], Any],
        on_stopped: Callable[[], Any] = lambda: None,
        jitter: random.Random | None = None,
    ) -> None:
        """Campaigns until `stop`; while leading, `on_started(lost)` runs in its own thread.

        `lost` is set the moment leadership ends (deadline missed, or `stop`); the work must stop
        acting then. After a loss the candidate campaigns again.
        """
        rng = jitter or random.Random()
        cfg = self.config
        while not stop.is_set():
            if not self.try_acquire_or_renew():
                stop.wait(cfg.retry_period * (1 + 0.2 * rng.random()))
                continue
            log.info("lease %s/%s: %s is the leader", cfg.namespace, cfg.name, cfg.identity)
            lost = threading.Event()
            worker = threading.Thread(target=on_started, args=(lost,), daemon=True, name="leader-work")
            worker.start()
            while not stop.is_set():
                stop.wait(cfg.retry_period)
                if stop.is_set():
                    break
                self.try_acquire_or_renew()
                if not self.is_leader:
                    log.warning("lease %s/%s: leadership lost", cfg.namespace, cfg.name)
                    break
            lost.set()
            worker.join(cfg.renew_deadline)
            on_stopped()
        self.release()

    # ------------------------------------------------------------------ internals
    def _create(self) -> bool:
        cfg = self.config
        stamp = micro_time(self._now())
        body = {
            "apiVersion": LEASE.api_version,
            "kind": "Lease",
            "metadata": {"name": cfg.name, "namespace": cfg.namespace},
            "spec": {
                "holderIdentity": cfg.identity,
                "leaseDurationSeconds": int(cfg.lease_duration),
                "acquireTime": stamp,
                "renewTime": stamp,
                "leaseTransitions": 0,
            },
        }
        try:
            written = self._api.request("POST", LEASE.collection(cfg.namespace), body=body)
        except ApiError as exc:
            if exc.status != 409:
                log.warning("lease %s/%s: %s", cfg.namespace, cfg.name, exc)
            return False
        return self._won(written)

    def _won(self, lease: Json) -> bool:
        self._observed, self._observed_at = lease.get("spec", {}), self._clock()
        self._renewed_at = self._observed_at
        return True
