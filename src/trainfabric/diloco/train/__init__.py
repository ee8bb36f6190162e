"""Real DiLoCo training (torch is imported only inside this package).

Public API: :func:`~trainfabric.diloco.train.launch.start` / ``train`` with a
:class:`~trainfabric.diloco.train.config.TrainConfig` and an optional controller (an object
with ``decide(Progress) -> bool``, :mod:`~trainfabric.diloco.train.controller`), returning a
:class:`~trainfabric.diloco.train.report.TrainResult`. See ``config`` for the recipe's
defaults, ``netns`` for the shaped links, ``learner`` for the loop.
"""
