"""Ray mode's parts: simulator and collector actors, their placement and fan-out."""
