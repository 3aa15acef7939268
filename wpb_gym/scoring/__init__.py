"""How a run is scored: the metrics (``metrics``) and the exact hindsight oracle and its F1
bound (``oracle``)."""
