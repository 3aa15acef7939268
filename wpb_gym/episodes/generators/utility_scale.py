"""The utilities episode labels give to steps, shared by every episode generator.

The paper's Table 1 scale (``generator.py``): a drift is worth 5 (6 inside a burst), an
ordinary step 1 and an exact repeat of the previous step 0.5. The contract change model
(``contracts.py``) and real drift (``real/``) add 2 for a cosmetic change, and the contract
model 0 for a warm-up step (unscored: it shows an endpoint's starting state).
"""

from __future__ import annotations

UTILITY_BURST_DRIFT = 6.0
UTILITY_DRIFT = 5.0
UTILITY_ORDINARY = 1.0
UTILITY_REPEAT = 0.5
UTILITY_COSMETIC = 2.0
UTILITY_WARMUP = 0.0
