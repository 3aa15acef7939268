"""Where episodes come from: JSONL files (``jsonl``), frozen sets (``frozen``), the
episode sources the env and the evaluator draw from (``sources``), the generated regimes
(``generators``: the paper's in ``paper``, the contract regimes in ``contracts``) and real
drift from OpenAPI histories (``real``)."""
