"""Settings for the whole test suite."""

from __future__ import annotations

import os

# The in-memory store checks that nobody changes a shared write result or event object in place
# (store/memory.py, `check_shared`): every test that reads its events is such a check.
os.environ.setdefault("GPUFLEET_STORE_CHECKS", "1")
