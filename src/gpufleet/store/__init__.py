"""The Store protocol and its embedded SQLite implementation.

Write code against `Store` (in `protocol`); open the embedded one with `SqliteStore.open(state_dir)`,
or keep a throw-away world (the simulator's) in memory with `MemoryStore()`.
"""

from gpufleet.store.memory import MemoryStore
from gpufleet.store.protocol import EventType, ListResult, ObjectRef, Selector, Store, Watch, WatchEvent
from gpufleet.store.sqlite import SqliteStore, SqliteWatch

__all__ = [
    "EventType",
    "ListResult",
    "MemoryStore",
    "ObjectRef",
    "Selector",
    "SqliteStore",
    "SqliteWatch",
    "Store",
    "Watch",
    "WatchEvent",
]
