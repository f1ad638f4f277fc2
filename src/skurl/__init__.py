"""skurl: reinforcement-learning replenishment policies for huge SKU catalogs."""

__version__ = "0.1.0"
