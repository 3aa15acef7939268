"""Running policies and reporting on them: one episode (``runner`` over ``playing``, with the
``referee`` judging every action; ``isolation``, ``policy_process`` and ``wire`` for isolated
mode), the grid (``grid``), run folders (``run_folder``), reports and figures (``report``,
``plots``), paired comparisons (``compare``), statistics over training seeds (``seed_stats``)
and the decidability report (``decidability``)."""
