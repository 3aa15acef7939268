"""Stable-Baselines3: ``wpb train`` (``train``, with its recipes), imitation before RL
(``imitation``), SB3's ``VecEnv`` over the native vector env (``native_vec_env``), training's
speed-ups (``masked_policy``, ``optimizer``) and a trained model as an agent (``agent``)."""
