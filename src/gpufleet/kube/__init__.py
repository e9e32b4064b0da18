"""The Kubernetes world: CRDs, informers, binder, evictor, leader election and manifests."""
