"""Controllers of the embedded (and later Kubernetes) world, written against the Store protocol only.

`plane.build_manager(store)` builds them all: scheduling (the scheduler cache and its decisions),
health (cordon and evict), TrainingJob, GPUPool (nodes, autoscaling, idle cost) and InferenceService
(replicas, autoscaling, rollouts). The manager is a participant of `gpufleet.twin.driver.Runtime`.
"""

# Registers the admission checks that need the MIG catalogue into the API's validator hook.
from gpufleet.controllers import admission as admission
