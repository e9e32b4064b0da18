"""The state directory is private to its owner: the database in it holds every queue's objects.

Queue tokens scope what a client may read through the API; a world-readable `gpufleet.db` would let any
local user read it all directly. The directory is made 0700 and every file in it 0600, correcting a
directory an older version left open (one log line per correction), and the process creates its files
without group or other bits from then on (SQLite makes its `-wal` and `-shm` files with the umask).
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

log = logging.getLogger(__name__)

DIRECTORY_MODE = 0o700
FILE_MODE = 0o600


def make_private(directory: Path) -> list[Path]:
    """Creates or corrects the state directory and its files; returns what was corrected."""
    os.umask(os.umask(0o077) | 0o077)  # keeps any stricter umask the user set
    directory.mkdir(mode=DIRECTORY_MODE, parents=True, exist_ok=True)
    corrected = []
    for path in (directory, *sorted(directory.iterdir())):
        mode = path.lstat().st_mode
        if stat.S_ISLNK(mode):
            continue  # its target is not ours to change
        wanted = DIRECTORY_MODE if stat.S_ISDIR(mode) else FILE_MODE
        if stat.S_IMODE(mode) & 0o077:
            os.chmod(path, stat.S_IMODE(mode) & wanted)
            log.warning("%s was open to other users (mode %o); now %o", path, stat.S_IMODE(mode), wanted)
            corrected.append(path)
    return corrected
