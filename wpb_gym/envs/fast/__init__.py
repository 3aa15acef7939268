"""The compiled core both envs step on: every speed device of ``envs.env`` and ``envs.vector``
lives in this package. A single env is a core with one row; the vector env's sub-envs are the
rows of one core.

``episode_arrays`` reads an episode as a single env just reset to it does (each distinct
observation described once by ``contents``) and turns it into flat arrays (``layout`` says
where each thing sits; ``arenas`` holds every sub-env's in three buffers); ``kernel`` steps
many sub-envs over them in one compiled call (numba), with ``comparisons`` and ``memory`` as
its parts, compiled without reference counting (``borrowing``). Generated episodes of the
paper's four regimes and of the contract regimes without text are compiled from their random
draws alone (NumPy's, as the generator makes them), by ``paper_episodes`` and
``contract_episodes`` (their U*(B) by ``oracle_by_class``; those a step ends, and the paper
regimes' a step starts, together by ``drawn_batches``): they are made only if read
(``env.episode``). Every other episode (those with documentation sections, migration guides or
renames, or under compression, episodes from files) is made by its Python generator or read from its file
and read by ``episode_arrays``; generated ones can be made, read and compiled ahead in worker
processes (``episode_workers``). The env's Python parts (the store, the observation encoder,
the reward function) are the statement the core is tested against: the differential tests play
both on the same seeds and actions and require equal outputs.

numba is imported with the first env's first reset (``core``), not with ``wpb_gym``; compiled code
is cached on disk (``compile_cache``, which says on stderr when numba compiles for long). On a
first run, with nothing cached, numba compiles in a background process while the core calls
the same functions as Python (``first_run``).
"""
