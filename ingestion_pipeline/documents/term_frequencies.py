"""What a process remembers of its tenants' words: how many of a tenant's served chunks hold each (its document
frequency, the full-text arm's idf), so a word already asked about is not counted again.

Counting is most of the full-text arm's first statement for a large tenant: a common word's matches are read from
the heap one by one up to the count's cap (a tenant of 88,325 chunks: p50 12 / p95 23 ms of a search's ~35 ms,
``benchmarks/search_latency.py``), and queries repeat words (their frequencies follow Zipf's law). A count is
remembered under its *scope*: the database (server and database oid), the tenant, the tenant's change counter
(sql/045: it grows with every change to what the tenant serves, and the full-text rows counted change only then)
and the count's cap. So a remembered count is the one counting would give now, and a change makes the tenant's
older counts unreachable: they age out, least recently used first, past ``MAX_ENTRIES``. A database rewound in
place under a running process (a point-in-time recovery) rewinds its counters too: ``MAX_AGE_SECONDS`` bounds how
long a count from before can be served. Shared by the process's threads.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Hashable

MAX_ENTRIES = 100_000  # about 35 MB at most (measured): a word of one tenant at one change count each
MAX_AGE_SECONDS = 3600.0

Word = tuple[str, str]  # text search configuration, lexeme


class TermFrequencies:
    """A bounded map of (scope, configuration, lexeme) to a document frequency."""

    def __init__(self, max_entries: int = MAX_ENTRIES, max_age_seconds: float = MAX_AGE_SECONDS) -> None:
        self.max_entries, self.max_age_seconds = max_entries, max_age_seconds
        self._counts: OrderedDict[tuple[Hashable, str, str], tuple[int, float]] = OrderedDict()
        self._lock = threading.Lock()

    def known(self, scope: Hashable, words: list[Word]) -> dict[Word, int]:
        """The remembered counts of ``words`` in ``scope``."""
        found = {}
        oldest = time.monotonic() - self.max_age_seconds
        with self._lock:
            for cfg, lexeme in words:
                key = (scope, cfg, lexeme)
                entry = self._counts.get(key)
                if entry is None:
                    continue
                if entry[1] < oldest:
                    del self._counts[key]
                    continue
                self._counts.move_to_end(key)
                found[(cfg, lexeme)] = entry[0]
        return found

    def remember(self, scope: Hashable, counts: dict[Word, int]) -> None:
        now = time.monotonic()
        with self._lock:
            for (cfg, lexeme), df in counts.items():
                self._counts[(scope, cfg, lexeme)] = (df, now)
                self._counts.move_to_end((scope, cfg, lexeme))
            while len(self._counts) > self.max_entries:
                self._counts.popitem(last=False)

    def forget(self) -> None:
        """Empty it (what a benchmark does to time the counting)."""
        with self._lock:
            self._counts.clear()

    def __len__(self) -> int:
        return len(self._counts)


TERM_FREQUENCIES = TermFrequencies()  # the process's
