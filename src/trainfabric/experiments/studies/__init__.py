"""Cross-pillar studies (issue 16): each composes the pillars' public APIs into one registered
experiment (``trainfabric experiments run NAME``); :mod:`.common` holds what they share."""

from trainfabric.experiments.studies import common  # noqa: F401
