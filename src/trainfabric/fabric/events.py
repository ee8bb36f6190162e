"""Link events: the fabric's links going down and coming back, an input of every engine.

The engines (:mod:`trainfabric.fabric.flow`, :mod:`trainfabric.fabric.tasks`,
:mod:`trainfabric.fabric.packet`) apply an event to the truth at ``time_s``; each
load-balancing mechanism learns it after its reaction time (:mod:`trainfabric.fabric.routing`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainfabric.errors import ConfigError


@dataclass(frozen=True)
class LinkEvents:
    """Link ``link[i]`` goes down (``up[i] = False``) or up at ``time_s[i]``."""

    time_s: np.ndarray
    link: np.ndarray
    up: np.ndarray

    def __post_init__(self):
        t = np.asarray(self.time_s, float)
        order = np.argsort(t, kind="stable")
        object.__setattr__(self, "time_s", t[order])
        object.__setattr__(self, "link", np.asarray(self.link, np.int64)[order])
        object.__setattr__(self, "up", np.asarray(self.up, bool)[order])
        if not (self.time_s.shape == self.link.shape == self.up.shape):
            raise ConfigError("events", "time_s, link and up must have the same length")
        if np.any(self.time_s < 0) or not np.all(np.isfinite(self.time_s)):
            raise ConfigError("events.time_s", "must be finite and >= 0")

    @classmethod
    def flap(cls, links, down_s: float, up_s: float) -> LinkEvents:
        """``links`` down at ``down_s`` and back up at ``up_s``."""
        links = np.atleast_1d(np.asarray(links, np.int64))
        if not up_s > down_s:
            raise ConfigError("flap.duration_s", "must be > 0")
        m = links.size
        return cls(
            time_s=np.r_[np.full(m, down_s), np.full(m, up_s)],
            link=np.r_[links, links],
            up=np.r_[np.zeros(m, bool), np.ones(m, bool)],
        )
