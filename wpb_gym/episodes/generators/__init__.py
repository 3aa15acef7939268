"""Seeded episode generators: the paper's four regimes (``paper``) and the contract regimes
(``contracts``), which share the utility scale (``utility_scale``)."""
