"""The resource-claim controller for the DRA e2e tests.

A pod that names a ResourceClaimTemplate gets its claim from kube-controller-manager's
resource-claim controller, which a full cluster runs by default. A test cluster whose controller
manager runs only a few controllers (or none) would leave such pods without claims, so the suite
plays that part itself as it plays the others (see conftest): it starts the real
kube-controller-manager with that one controller, found as $KUBE_CONTROLLER_MANAGER, on PATH, or in
the `bin/` beside the kubeconfig (../shared/tools/k8s-real's layout). It starts one only where a
probe pod shows no claim is made, so a cluster that has the controller never sees two.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from gpufleet.kube.transport import ApiError, Transport

DRA = "/apis/resource.k8s.io/v1"
PROBE_SECONDS = 5.0
START_SECONDS = 60.0


def _binary(kubeconfig: str) -> str | None:
    named = os.environ.get("KUBE_CONTROLLER_MANAGER")
    if named:
        return named
    found = shutil.which("kube-controller-manager")
    if found:
        return found
    beside = Path(kubeconfig).resolve().parent / "bin" / "kube-controller-manager"
    return str(beside) if beside.is_file() else None


def _claim_made(api: Transport, namespace: str, run: str, seconds: float) -> bool:
    """Whether a pod naming a template gets its claim within `seconds` (the pod names a scheduler that
    does not exist, so nothing else happens to it; pod, claim and template are removed after)."""
    base = f"{DRA}/namespaces/{namespace}"
    template = f"probe-{run}"
    api.request(
        "POST",
        f"{base}/resourceclaimtemplates",
        body={
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": template, "namespace": namespace},
            "spec": {
                "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "probe"}}]}}
            },
        },
    )
    pod = f"probe-{run}-{int(time.monotonic() * 1000) % 100000}"
    api.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/pods",
        body={
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": pod, "namespace": namespace},
            "spec": {
                "schedulerName": f"nobody-{run}",
                "resourceClaims": [{"name": "r", "resourceClaimTemplateName": template}],
                "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
            },
        },
    )
    made: list[str] = []
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not made:
            got = api.request("GET", f"/api/v1/namespaces/{namespace}/pods/{pod}")
            statuses = (got.get("status") or {}).get("resourceClaimStatuses") or []
            made = [s["resourceClaimName"] for s in statuses if s.get("resourceClaimName")]
            time.sleep(0.25)
    finally:
        with contextlib.suppress(ApiError):
            api.request(
                "DELETE", f"/api/v1/namespaces/{namespace}/pods/{pod}", body={"gracePeriodSeconds": 0}
            )
        for claim in made:
            with contextlib.suppress(ApiError):
                api.request("DELETE", f"{base}/resourceclaims/{claim}")
        with contextlib.suppress(ApiError):
            api.request("DELETE", f"{base}/resourceclaimtemplates/{template}")
    return bool(made)


@contextlib.contextmanager
def resource_claim_controller(api: Transport, namespace: str, run: str, kubeconfig: str) -> Iterator[str]:
    """Yields why claims are made ("the cluster's" or "started here"); raises LookupError with the
    reason when none can be."""
    if _claim_made(api, namespace, run, PROBE_SECONDS):
        yield "the cluster's"
        return
    binary = _binary(kubeconfig)
    if binary is None:
        raise LookupError(
            "the cluster makes no claims from templates and no kube-controller-manager was found "
            "($KUBE_CONTROLLER_MANAGER, PATH, or bin/ beside the kubeconfig) to run its "
            "resource-claim controller"
        )
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            [
                binary,
                f"--kubeconfig={kubeconfig}",
                "--controllers=resourceclaim-controller",
                "--leader-elect=false",
                "--secure-port=0",
                "--authentication-skip-lookup=true",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            if not _claim_made(api, namespace, run, START_SECONDS):
                log.seek(0)
                tail = log.read().decode(errors="replace")[-2000:]
                raise LookupError(
                    f"kube-controller-manager's resource-claim controller made no claim:\n{tail}"
                )
            yield "started here"
        finally:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
