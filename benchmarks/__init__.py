"""lionexec's benchmark suite: lionexec, lionagi 0.36.0 and trio floors, side by side.

Run it the way CI and the README do::

    nox -s bench                      # everything; writes benchmarks/results/latest.{json,md}
    nox -s bench -- --quick           # small sizes, a smoke run (writes results/quick.*)
    nox -s bench -- --only events,act # some areas (merged into latest.* by area)

or, in any environment that has lionexec (and optionally lionagi), ``python -m benchmarks``
from the repository root (``--lionagi-python PATH`` runs the lionagi side with another
interpreter; ``--help`` lists the rest).

Areas, one module each: :mod:`~benchmarks.events` (issue 2), :mod:`~benchmarks.processor`
(issue 3), :mod:`~benchmarks.tools` (issue 4), :mod:`~benchmarks.act` (issues 6, 10, 13),
:mod:`~benchmarks.scaling` (issue 7), :mod:`~benchmarks.server_load` and, beside the
journal's own rows, :mod:`~benchmarks.dbos_compare` (DBOS against a journaled call; ``dbos``
from the ``bench`` dependency group, or n/a). Two floors: the bare
raw-trio floor (the least the work can cost) and, for ``act``, the equivalent-work floor
(:mod:`benchmarks._floor`: the same contract in lean plain trio); both ratios are reported.
Each implementation of an area runs in its own subprocess (:mod:`benchmarks._harness`);
:mod:`benchmarks.report` makes the table and :mod:`benchmarks.plot` the scaling plot
(``results/scaling.png``, when matplotlib is installed). A side that cannot run (library
missing, feature not there yet) shows as "n/a" with the reason. The run makes two passes and
reports each timed figure as the median of all runs with its interquartile range (see
``__main__``).

These are measurements, not tests: nothing here asserts a time.
"""
