"""The direct masked policy trains exactly what SB3-contrib's own masked policy trains."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sb3_contrib import MaskablePPO
from stable_baselines3 import PPO
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor

from agents.sb3.masked_policy import direct_masking
from agents.sb3.train import build_vec_env

KWARGS = {"length": 30, "api_pool": 6, "dense_reward": True, "episode_seed": 2}
SMALL = {"n_steps": 32, "batch_size": 16, "n_epochs": 2, "seed": 4, "device": "cpu"}


def _model(direct: bool, policy: str = "MlpPolicy", env_kwargs=None, n_envs: int = 3, vec_env: str = "native",
           **policy_kwargs):
    torch.set_num_threads(1)
    env = build_vec_env({**KWARGS, **(env_kwargs or {})}, n_envs, 2, vec_env)
    model = MaskablePPO(policy, env, policy_kwargs={"net_arch": [16], **policy_kwargs}, **SMALL)
    if direct:
        assert direct_masking(model)
    return model


def _trained(direct: bool, **kwargs) -> tuple[dict, MaskablePPO]:
    model = _model(direct, **kwargs)
    model.learn(3 * 32 * 3)  # three rollouts and updates
    return {k: v.clone() for k, v in model.policy.state_dict().items()}, model


class Projected(BaseFeaturesExtractor):
    """A features extractor with weights of its own (the flat one has none)."""

    def __init__(self, observation_space, features_dim: int = 12) -> None:
        super().__init__(observation_space, features_dim)
        self.linear = torch.nn.Linear(observation_space.shape[0], features_dim)

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(observations))


@pytest.mark.parametrize("setting", [
    {},
    {"vec_env": "dummy"},
    {"share_features_extractor": False, "features_extractor_class": Projected},
    {"policy": "MultiInputPolicy", "env_kwargs": {"observation_mode": "dict"}},
    {"env_kwargs": {"regime": "contract_mix", "track": "privileged"}},
], ids=["native", "dummy", "separate-extractors", "dict-observations", "contract-privileged"])
def test_training_gives_the_same_weights_bit_for_bit(setting):
    stock, stock_model = _trained(False, **setting)
    direct, direct_model = _trained(True, **setting)
    assert stock.keys() == direct.keys()
    assert all(torch.equal(stock[k], direct[k]) for k in stock)
    # and the last rollout: actions sampled, their log-probabilities, the values
    for name in ("actions", "log_probs", "values", "advantages"):
        assert np.array_equal(getattr(stock_model.rollout_buffer, name), getattr(direct_model.rollout_buffer, name))


def test_the_rollout_forward_and_evaluate_actions_match_on_any_mask():
    stock, direct = _model(False), _model(True)
    direct.policy.load_state_dict(stock.policy.state_dict())
    n = stock.action_space.n
    obs = torch.as_tensor(np.random.default_rng(0).random((64, *stock.observation_space.shape), dtype=np.float32))
    rng = np.random.default_rng(1)
    masks = rng.random((64, n)) < 0.3
    masks[np.arange(64), rng.integers(0, n, 64)] = True  # at least one valid action per row
    masks[0] = False
    masks[0, 3] = True  # one valid action: probability 1, entropy 0
    for deterministic in (False, True):
        torch.manual_seed(7)
        want = stock.policy(obs, deterministic=deterministic, action_masks=masks)
        torch.manual_seed(7)
        got = direct.policy(obs, deterministic=deterministic, action_masks=masks)
        assert all(torch.equal(a, b) for a, b in zip(want, got, strict=True))
        assert masks[np.arange(64), got[0].numpy()].all()
    actions = torch.as_tensor(np.argmax(masks, axis=1), dtype=torch.float32)  # as the buffer stores them
    float_masks = torch.as_tensor(masks, dtype=torch.float32)
    want = stock.policy.evaluate_actions(obs, actions.long().flatten(), action_masks=float_masks)
    got = direct.policy.evaluate_actions(obs, actions.long().flatten(), action_masks=float_masks)
    assert all(torch.equal(a, b) for a, b in zip(want, got, strict=True))
    assert got[2][0] == 0
    # the gradients too
    for policy, outputs in ((stock.policy, want), (direct.policy, got)):
        policy.zero_grad()
        (outputs[0].sum() + outputs[1].sum() + outputs[2].sum()).backward()
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(stock.policy.parameters(), direct.policy.parameters(),
                                                           strict=True))


@pytest.fixture(scope="module")
def models():
    stock, direct = _model(False), _model(True)
    direct.policy.load_state_dict(stock.policy.state_dict())
    return stock, direct


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_any_observations_and_masks_give_sb3_contribs_numbers(models, data):
    stock, direct = models
    n, width = int(stock.action_space.n), int(stock.observation_space.shape[0])
    rows = data.draw(st.integers(1, 6))
    values = data.draw(st.lists(st.floats(0, 1, width=32), min_size=rows * width, max_size=rows * width))
    obs = torch.as_tensor(np.asarray(values, dtype=np.float32).reshape(rows, width))
    masks = np.asarray(data.draw(st.lists(st.booleans(), min_size=rows * n, max_size=rows * n))).reshape(rows, n)
    masks[:, data.draw(st.integers(0, n - 1))] = True
    scale = data.draw(st.sampled_from([1e-3, 1.0, 50.0, 1e4]))  # flat to sharp distributions
    saved = {k: v.clone() for k, v in stock.policy.state_dict().items()}
    try:
        with torch.no_grad():
            for model in models:
                model.policy.action_net.weight.mul_(scale)
        seed = data.draw(st.integers(0, 2**31))
        torch.manual_seed(seed)
        want = stock.policy(obs, action_masks=masks)
        torch.manual_seed(seed)
        got = direct.policy(obs, action_masks=masks)
        assert all(torch.equal(a, b) for a, b in zip(want, got, strict=True))
        want = stock.policy.evaluate_actions(obs, got[0], action_masks=masks)
        got = direct.policy.evaluate_actions(obs, got[0], action_masks=masks)
        assert all(torch.equal(a, b) for a, b in zip(want, got, strict=True))
    finally:
        for model in models:
            model.policy.load_state_dict(saved)


def test_unmasked_calls_other_algorithms_and_saved_models_are_sb3s_own(tmp_path):
    stock, direct = _model(False), _model(True)
    direct.policy.load_state_dict(stock.policy.state_dict())
    obs = torch.zeros((2, *stock.observation_space.shape))
    torch.manual_seed(0)
    want = stock.policy(obs)
    torch.manual_seed(0)
    assert all(torch.equal(a, b) for a, b in zip(want, direct.policy(obs), strict=True))
    assert not direct_masking(PPO("MlpPolicy", build_vec_env(KWARGS, 1, 0, "dummy"), device="cpu"))
    direct.save(tmp_path / "model.zip")
    loaded = MaskablePPO.load(tmp_path / "model.zip", device="cpu")
    assert "forward" not in vars(loaded.policy) and type(loaded.policy) is type(stock.policy)
    assert all(torch.equal(a, b) for a, b in zip(loaded.policy.parameters(), direct.policy.parameters(), strict=True))


def test_a_deep_copy_plays_its_own_weights_and_a_subclass_keeps_its_methods():
    import copy

    from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy

    direct = _model(True)
    twin = copy.deepcopy(direct.policy)
    with torch.no_grad():
        for parameter in twin.parameters():
            parameter.add_(1.0)
    obs = torch.rand((3, *direct.observation_space.shape))
    for masks in (None, np.ones((3, direct.action_space.n), dtype=bool)):
        want = MaskableActorCriticPolicy.forward(twin, obs, deterministic=True, action_masks=masks)
        got = twin(obs, deterministic=True, action_masks=masks)
        assert all(torch.equal(a, b) for a, b in zip(want, got, strict=True))  # the copy's weights, masked or not
        assert not torch.equal(got[1], direct.policy(obs, deterministic=True, action_masks=masks)[1])

    class Sharper(MaskableActorCriticPolicy):
        def _get_action_dist_from_latent(self, latent_pi):
            return self.action_dist.proba_distribution(action_logits=self.action_net(latent_pi) * 10)

    model = MaskablePPO(Sharper, build_vec_env(KWARGS, 1, 0, "native"), device="cpu")
    assert not direct_masking(model) and "forward" not in vars(model.policy)
