"""The tasks graphssl's commands run, each an importable function of a composed config.

:func:`graphssl.tasks.train.train` (``conf/train.yaml``), :func:`graphssl.tasks.evaluate.evaluate`
(``conf/evaluate.yaml``), :func:`graphssl.tasks.compare.run_compare` (``conf/compare.yaml``),
:func:`graphssl.tasks.report.run_report` (``conf/report.yaml``) and
:func:`graphssl.tasks.stability.run_stability` (``conf/stability.yaml``); :mod:`graphssl.cli`
wraps each in ``@hydra.main``.
"""
