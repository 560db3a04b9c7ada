"""lit_otclust: deep clustering with entropic optimal transport (Genevay, Dulac-Arnold, Vert, 2020)."""

__version__ = "0.1.0"
