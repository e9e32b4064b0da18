"""How one GPU is shared: the MIG profile catalogue and placement rules, time-slicing and MPS units."""
