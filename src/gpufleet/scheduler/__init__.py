"""The scheduling core: ordering, quota, placement, preemption and pending reasons. Pure: no I/O, no clock."""
