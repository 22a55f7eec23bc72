"""The data cursor: where a run is in its training rows (which `stateset_agents.plugin_api.datasets.load_dataset`
reads, refusing validation and test rows), kept in every checkpoint so a resumed run draws the same rows."""
from __future__ import annotations

import numpy as np


class Cursor:
    """Where the run is in the data: a seeded permutation per epoch, so (epoch, index) alone restores the order."""

    def __init__(self, n: int, seed: int, epoch: int = 0, index: int = 0):
        self.n, self.seed, self.epoch, self.index = n, seed, epoch, index

    def _order(self) -> np.ndarray:
        return np.random.RandomState((self.seed * 1_000_003 + self.epoch) % 2**32).permutation(self.n)

    def take(self, k: int) -> list[int]:
        out: list[int] = []
        while len(out) < k:
            if self.index >= self.n:
                self.epoch, self.index = self.epoch + 1, 0
            order = self._order()
            grab = min(k - len(out), self.n - self.index)
            out.extend(int(i) for i in order[self.index:self.index + grab])
            self.index += grab
        return out

    def state(self) -> dict[str, int]:
        return {"epoch": self.epoch, "index": self.index}
