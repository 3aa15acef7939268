"""Seeded episode generators: the paper's four regimes (``paper``, whose rules ``paper_structure``
states once for the generator and the vector env's compiled core) and the contract regimes
(``contracts``), which share the utility scale (``utility_scale``); and the query tier
(``queries``, its query process in ``query_process``)."""
