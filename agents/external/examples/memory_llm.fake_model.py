#!/usr/bin/env python3
"""A stand-in for a language model behind memory_llm.py's hook: reads the prompt on stdin and
answers by rule. A deprecated endpoint's fact makes its newest memory obsolete (DELETE), or
adds nothing if there is none (NONE); another fact about an endpoint memory holds is an UPDATE
of its newest memory; anything else is ADDed. It chatters first, as models do."""

import json
import sys

text = sys.stdin.read().splitlines()
fact = json.loads(text[1])
ids = [int(line.split(":", 1)[0]) for line in text[3:-1] if line[:1].isdigit()]
print("Thinking about it...")
if fact.get("deprecated"):
    print(json.dumps({"event": "DELETE", "id": max(ids)} if ids else {"event": "NONE"}))
elif ids:
    print(json.dumps({"event": "UPDATE", "id": max(ids)}))
else:
    print(json.dumps({"event": "ADD"}))
