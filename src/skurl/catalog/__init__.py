"""SKU parameters: the Catalog struct of arrays, generators, file loaders, partitioning."""

from __future__ import annotations

from typing import TYPE_CHECKING

from skurl.catalog.schema import COLUMNS, DIST_CODES, Catalog

if TYPE_CHECKING:  # config/ imports catalog.columns: this package stays free of config at import
    from skurl.config import CatalogConfig



def load_catalog(cfg: CatalogConfig, skus: int | None = None) -> Catalog:
    """The catalog that `cfg` describes (validated). `skus` overrides cfg.skus."""
    if cfg.kind == "uniform":
        from skurl.catalog.uniform import uniform_catalog

        return uniform_catalog(cfg, skus)
    if cfg.kind == "serial":
        from skurl.catalog.serial import serial_catalog

        return serial_catalog(cfg, skus)
    if cfg.kind == "synthetic":
        from skurl.catalog.synthetic import synthetic_catalog

        return synthetic_catalog(cfg, skus)
    from skurl.catalog.io import read_catalog

    cat = read_catalog(cfg.path)
    if skus is not None and skus < len(cat):
        cat = cat.subset(slice(0, skus))
    return cat


__all__ = ["COLUMNS", "DIST_CODES", "Catalog", "load_catalog"]
