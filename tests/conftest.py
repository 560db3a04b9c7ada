"""Shared test fixtures: where the offline data lives."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

# In CI the property tests draw the same examples every run (derandomize): a red CI run then means the code
# changed, not that this run's draw found an old corner; random exploration stays on developers' machines, where
# a failure prints its case to add as an @example (as tests/test_ot.py's float32 case was found).
settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

REPO_ROOT = Path(__file__).resolve().parents[1]
# The data sets lie beside the repository in ../shared/data (torchvision's layout); CI and
# developers' machines have no internet, so tests never download.
DATA_DIR = Path(os.environ.get("LIT_OTCLUST_DATA", REPO_ROOT.parent / "shared" / "data")).resolve()


@pytest.fixture(scope="session")
def data_dir() -> Path:
    # The image file, not the folder: torchvision's failed download attempt leaves an empty MNIST/raw behind.
    if not any((DATA_DIR / "MNIST" / "raw").glob("train-images-idx3-ubyte*")):
        if os.environ.get("CI"):
            # In CI a skipped data test would make a green run mean nothing: the data must be there.
            pytest.fail(f"CI: offline data not found at {DATA_DIR} (set LIT_OTCLUST_DATA to the folder holding MNIST/)")
        pytest.skip(f"offline data not found at {DATA_DIR} (set LIT_OTCLUST_DATA to the folder holding MNIST/ and cifar-10-batches-py/)")
    return DATA_DIR


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    """W&B offline and silent in every test: no network here, and no prompt anywhere."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")


def pytest_collection_modifyitems(config, items) -> None:
    """`slow` for every test that reads the data files or starts process groups or SLURM jobs, besides those marked
    by hand (subprocesses, long fits): `pytest -m "not slow"` is the quick loop, the full suite runs in CI."""
    for item in items:
        if ("data_dir" in getattr(item, "fixturenames", ()) or item.get_closest_marker("distributed")
                or item.get_closest_marker("slurm")):
            item.add_marker(pytest.mark.slow)
