"""Isolated evaluation: each policy in its own process (``policy_process``), shown only what it
may see and answering in plain actions (``wire``), driven and judged by the evaluator
(``isolation``)."""
