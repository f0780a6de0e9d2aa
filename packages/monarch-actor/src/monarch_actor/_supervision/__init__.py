"""The runtime's side of supervision: what it reports to the supervision
tree and how it carries out what the tree decides."""
