"""A claim template with `firstAvailable` alternatives in the embedded world: the pod's claim gets the
first alternative the fleet can give (here the second: no A100 in an H100 fleet), its results naming
`<request>/<alternative>` as Kubernetes writes them, and quota counts it as the GPUs it asks."""

from __future__ import annotations

from .conftest import World
from .test_dra_claims import FLEET, claims, job, pods
from .test_dra_shared_charge import usage

PRIORITIZED = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: a100-else-h100, namespace: ml}
spec:
  spec:
    devices:
      requests:
        - name: gpus
          firstAvailable:
            - name: a100
              deviceClassName: gpu.nvidia.com
              count: 4
              selectors:
                - cel:
                    expression: >-
                      device.attributes["gpu.nvidia.com"].productName.startsWith("NVIDIA A100")
            - name: h100
              deviceClassName: gpu.nvidia.com
              count: 4
              selectors:
                - cel:
                    expression: >-
                      device.attributes["gpu.nvidia.com"].productName.startsWith("NVIDIA H100")
      constraints: [{requests: [gpus], distinctAttribute: gpu.nvidia.com/uuid}]
"""


def test_dra_first_available_takes_the_first_alternative_the_fleet_can_give(world: World) -> None:
    world.apply(FLEET)
    world.apply(PRIORITIZED)
    world.apply(job("pref", 2, claim="resourceClaimTemplateName: a100-else-h100"))
    world.runtime.run_for(60)
    running = pods(world, "pref")
    assert len(running) == 2
    for pod in running:
        allocation = claims(world)[pod.spec.resource_claims[0].resource_claim_name].status.allocation
        assert allocation is not None
        assert [r.request for r in allocation.devices.results] == ["gpus/h100"] * 4
        assert sorted(pod.spec.gpus) == sorted(
            int(r.device.split("-")[1]) for r in allocation.devices.results
        )
    assert usage(world, "pref") == {"H100-80GB": 8000}
