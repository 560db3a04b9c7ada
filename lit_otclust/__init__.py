"""lit_otclust: deep clustering with entropic optimal transport (Genevay, Dulac-Arnold, Vert, 2020)."""

from __future__ import annotations

from typing import TYPE_CHECKING

__version__ = "0.1.0"
__all__ = ["OTClustering", "__version__"]

if TYPE_CHECKING:
    from lit_otclust.estimator import OTClustering


def __getattr__(name: str):
    # On first use only: `import lit_otclust` (and the entry point, which must hold SIGTERM before torch starts any
    # thread: lit_otclust.startup) stays free of torch and Lightning.
    if name == "OTClustering":
        from lit_otclust.estimator import OTClustering

        return OTClustering
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
