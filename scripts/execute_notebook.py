"""Execute notebooks/results.ipynb in place, with its outputs, as it is committed: ``python scripts/execute_notebook.py``.

The notebook computes everything from the committed records; run this after records land so that what a reader sees
on the repository page is current (tests/test_experiments.py checks that it is).
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "results.ipynb"


def execute(path: Path = NOTEBOOK) -> nbformat.NotebookNode:
    """The notebook at ``path`` executed from the repository root's records (its kernel starts in notebooks/)."""
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    for cell in nb.cells:  # timings and run counts would make every execution a diff
        cell.metadata.pop("execution", None)
    return nb


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else NOTEBOOK
    nbformat.write(execute(), out)
    print(f"{out}: {out.stat().st_size / 1e3:.0f} kB")
