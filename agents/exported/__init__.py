"""Trained policies as data only: a folder that loading never runs code from.

An SB3 model file (``.zip``) and an RLlib checkpoint folder are pickles: loading one runs
whatever code it names, with the rights of the process that loads it. A policy *exported*
(``wpb export sb3 MODEL.zip --out DIR``, ``wpb export rllib CHECKPOINT --out DIR``) is a folder
of two files that are read, never executed:

* ``policy.json``: the format and its version, the library and algorithm, the architecture
  (the policy class by name, from a fixed table, and its sizes), the observation and action
  spaces, the env arguments that shape the observation, and the sha256 of the weights;
* ``weights.safetensors``: every tensor of the policy's ``state_dict``, in the safetensors
  format (a JSON header of names, dtypes and shapes, then raw little-endian numbers).

Loading (``load_policy``; ``make_agent("policy", path=DIR)``, ``wpb eval --agents policy:DIR``)
checks every field of ``policy.json`` for its type, rebuilds the env from its env arguments and
requires the spaces it gives to be those recorded, bounds the architecture by the weights it
must hold before anything is built, rebuilds the policy with the library's own class, and loads
the weights only if their names, shapes and dtypes are exactly the policy's. A file that is not
what it claims (a pickle or a zip renamed, another export's weights) is refused, naming the
file, in one line (``PolicyFileError``). The policy acts exactly as the model it was exported
from (``wpb export`` checks it on played episodes before it writes anything).

Parts: ``folder`` (the two files, read and written), ``spaces`` (spaces as JSON), ``sb3`` and
``rllib`` (each library's policies, out and back in), ``export`` (the round trip, checked) and
``agent`` (the registry's ``policy`` agent).
"""
