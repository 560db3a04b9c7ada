"""The lab: the machinery that produced RESULTS.md, beside the library and never imported by it.

- :mod:`~lit_otclust.lab.studies`: a study as data (a YAML file of configs, seeds, grid, overrides, output);
- :mod:`~lit_otclust.lab.runner`: its fits, here or as a SLURM job array, each leaving a JSON record;
- :mod:`~lit_otclust.lab.stats`, :mod:`~lit_otclust.lab.paper`, :mod:`~lit_otclust.lab.reports`,
  :mod:`~lit_otclust.lab.proportions`: tables, paired tests, the paper's numbers, what ``report`` writes;
- :mod:`~lit_otclust.lab.baselines`: k-means on raw pixels, Table 1's first column;
- :mod:`~lit_otclust.lab.probes`: MNIST measurements RESULTS cites beside the records;
- :mod:`~lit_otclust.lab.legacy`: old flags of committed studies rewritten into today's;
- :mod:`~lit_otclust.lab.experiments`: the command line, ``python -m lit_otclust.experiments``.
"""
