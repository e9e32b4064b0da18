"""The digital twin: virtual nodes and pods, clocks, training work, traffic and faults.

Wiring the embedded control plane (what `gpufleet up` does; the twin never imports the controllers,
so whoever starts both hands them to one driver):

    from gpufleet.controllers.plane import build_manager
    from gpufleet.twin.clock import WallClock
    from gpufleet.twin.driver import Runtime
    from gpufleet.twin.twin import Twin

    clock = WallClock()
    runtime = Runtime(store, clock=clock, participants=[Twin(store, clock=clock), build_manager(store)])
    thread = runtime.start(stop_event)     # daemon thread; set stop_event to end it

With a `VirtualClock` (and `SqliteStore.open(dir, clock=clock.datetime)` so stored times are virtual),
`runtime.run_for(seconds)` / `run_until(t)` replay hours of a fleet in seconds. Faults:
`twin.inject(GpuFailure(node, gpu) | GpuRepair(node, gpu) | NodeLoss(node) | SpotInterruption(node))`,
safe from any thread, happen at the clock's time of the call (on the wall clock, the runtime's next
instant, never between two rounds of one already read); random ones at the rates of
`TwinConfig.faults` (seeded). `twin.faults` counts what happened, by kind.
"""
