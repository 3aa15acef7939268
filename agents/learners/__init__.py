"""The bandit learners (``epsilon_greedy``, ``bandit_ucb``): the agents (``bandits``), the
contexts they learn over (``contexts``) and their training by ``wpb train`` (``training``)."""
