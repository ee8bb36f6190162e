"""Cross-pillar studies (issue 16): each composes the pillars' public APIs into one registered
experiment (``trainfabric experiments run NAME``); :mod:`.common` holds what they share."""

from trainfabric.experiments.studies import (  # noqa: F401
    common,
    rewire_or_defer,
    sync_over_ocs,
    sync_under_failures,
)
