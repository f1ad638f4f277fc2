"""Scratch columns of st for a day of a network catalog (free: network catalogs have no
substitution groups, whose columns these are otherwise); shared by sim/network.py and
sim/transfers.py."""

from __future__ import annotations

N_ORDER = 16  # today's order, units
N_REQUEST = 17  # what the row asks of its upstream today (order + owed)
N_SHIPPED = 18  # what its upstream ships it today (read again for the shipping cost)
N_BUMPED = 19  # allocation: got one of the leftover units already
N_DEMAND = 20  # customer demand (store) or requests received (upstream)
N_SALES = 21  # customer demand served (store) or units shipped (upstream)
N_LOST = 22  # lost or newly backordered (store), requests left unshipped (upstream)
N_POS = 23  # features: units at and below the row (on hand, in transit, less store backlog)
# Transfers, between the shipments and the features (the columns above are free then):
N_GIVE = N_REQUEST  # units a sender may still give
N_NEED = N_BUMPED  # units a receiver still needs
N_SENT = N_POS  # units sent today (> 0) or received (< 0, minus the units); read by settlement
