"""What a run folder says: the leaderboard, tables and ``run.json`` (``report``), the figures
(``plots``), paired comparisons and ablations (``compare``), statistics over training seeds
(``seed_stats``) and the decidability report (``decidability``); ``pairing`` matches their rows
episode by episode (by the episode's content hash), ``tables`` holds the tables
``wpb report`` writes, ``run_writer`` writes a run folder and ``intervals`` its bootstrap intervals;
``markdown`` is how text from the data (regime names, agent labels) enters them."""
