"""The data model and the rules every score rests on: steps and actions (``types``), byte
accounting (``accounting``), the budget (``budget``), the memory store and its rules
(``store``), the policy tracks (``tracks``) and the policy protocol (``policy``), plus small
shared pieces (read-only views, argument checks, the checks of settings' values and settings
files, error messages, strict JSON, safe file names, files written atomically, the version).
Nothing here imports another layer."""
