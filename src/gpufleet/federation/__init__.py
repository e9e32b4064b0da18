"""Federation: one management plane over several worker clusters (tracker issue 15).

The manager holds the queues and their quota over the whole fleet; each worker cluster reports a
summary of its capacity (`summary`), and the dispatcher (`dispatch`, over `take`) chooses the cluster of
each admitted workload from those summaries, never from every node. The lease rule (`lease`) keeps a
workload in one cluster at a time; `failover` runs both on fleet time. These are pure, like the
scheduling core. `convert`, `manager` and `controller` connect them to the Cluster and Queue objects
and the Store protocol. The live loops are `worker` (a worker plane's heartbeat and lease) and `mirror`
(the manager's dispatch and status mirroring), reaching each other through `link`'s protocols;
docs/federation.md has the decisions and what is left.
"""
