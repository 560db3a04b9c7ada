"""``python -m lit_otclust.experiments``: the lab's command line (:mod:`lit_otclust.lab.experiments`) under the name the
study files, records and reports cite. Part of the lab: nothing in the library imports it."""

from lit_otclust.lab.experiments import *  # noqa: F401,F403
from lit_otclust.lab.experiments import entry, main  # noqa: F401

if __name__ == "__main__":
    entry()
