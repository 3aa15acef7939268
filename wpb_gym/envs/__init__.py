"""The Gymnasium environment ``WritePolicyBench-v0`` (``env``), its parts (the per-episode
step table ``stream_table``, the rewards ``rewards``, the viewer ``render``) and the
registered ids (``registration``)."""
