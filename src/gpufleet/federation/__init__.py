"""Federation: one management plane over several worker clusters (tracker issue 15).

The manager holds the queues and their quota over the whole fleet; each worker cluster reports a
summary of its capacity (`summary`), and the dispatcher (`dispatch`, over `take`) chooses the cluster of
each admitted workload from those summaries, never from every node. These modules are pure, like the
scheduling core; talking to workers (the Cluster controller, a WorkerClient per world) builds on them.
"""
