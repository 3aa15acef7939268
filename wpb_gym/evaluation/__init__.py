"""Running policies and reporting on them: one episode (``runner`` over ``playing``, with the
``referee`` judging every action; ``isolated/`` for each policy in its own process), the grid
of episodes x budgets x tracks (``grid``), run folders (``run_folder``) and what they say
(``reports/``: the leaderboard, tables, figures, comparisons, seed statistics)."""
