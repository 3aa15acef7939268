"""Policies that act on WritePolicyBench: scripted baselines, oracle bounds, bandit learners, SB3 models.

``agents.registry.make_agent(name)`` builds any of them by name or spec alias; ``wpb agents``
lists them. Every agent runs in the offline evaluator (``wpb_gym.evaluation.runner.run_episode``) and in
the Gymnasium env (``agents.env_adapter.run_agent_in_env``, or SB3's ``evaluate_policy``
after ``agent.attach(env)``), with identical results. This package depends on ``wpb_gym``,
never the other way round.

``scripted`` holds the rule-following agents, ``learners`` the bandit learners, ``sb3`` and
``rllib`` training with those libraries and their models as agents; ``datasets`` records
agents' trajectories (``wpb dataset``) and ``sweep`` runs training trials on Ray Tune
(``wpb sweep``).
"""
