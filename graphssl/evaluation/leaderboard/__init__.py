"""A leaderboard of trained runs: one row per (method, dataset[, variant]), one column group per
probe, beside the published figures.

:func:`leaderboard` takes plain run records (a run id and name, metrics, params and a
``value(key)`` lookup, as :class:`~graphssl.evaluation.correlation.RunValues`) and returns a
:class:`Leaderboard`. Per row and probe ``p`` it gives the mean, standard deviation (``ddof=1``)
and count over the row's runs of ``probe/<p>/<metric>``, of the untrained baseline
``probe/<p>/baseline_<metric>`` and of the gain (trained − untrained per run, or untrained −
trained where lower is better, so a positive gain means training helped), and the published
figure with its source and the difference to it. Per row it also gives the epochs trained
(``train/epochs``), the selected epoch (``select/best_epoch``, 1-based) where the runs select
their weights on a validation probe, the training time (``time/train_seconds``), the peak
memory (``mem/peak_rss_gb``, the largest over the runs), and the params in which the row's runs
differ beyond their seeds (a row meant to hold seeds of one configuration that mixes two is
flagged, never silently averaged).

:func:`variance_split` splits the spread of a row's values into the seeds that caused it (the
pretraining seed, the dataset split's seed, the probe's seed) where the runs carry them as
separate params: a main-effects analysis of variance. :func:`published_figures` validates the
published figures (``conf/published.yaml``); :func:`write_leaderboard` writes the Markdown, HTML
and CSV files a report run logs.
"""

from graphssl.evaluation.leaderboard.board import (
    DEFAULT_FACTORS,
    DEFAULT_SAME_EXCEPT,
    Leaderboard,
    LeaderboardRow,
    ProbeCell,
    Stat,
    leaderboard,
    method_label,
    selection_notes,
    selection_protocol,
    stat,
)
from graphssl.evaluation.leaderboard.published import Published, published_figures
from graphssl.evaluation.leaderboard.render import (
    leaderboard_markdown,
    leaderboard_metrics,
    sources,
    table,
    write_leaderboard,
)
from graphssl.evaluation.leaderboard.variance import VarianceSplit, variance_split

__all__ = [
    "DEFAULT_FACTORS",
    "DEFAULT_SAME_EXCEPT",
    "Leaderboard",
    "LeaderboardRow",
    "ProbeCell",
    "Published",
    "Stat",
    "VarianceSplit",
    "leaderboard",
    "leaderboard_markdown",
    "leaderboard_metrics",
    "method_label",
    "published_figures",
    "selection_notes",
    "selection_protocol",
    "sources",
    "stat",
    "table",
    "variance_split",
    "write_leaderboard",
]
