#!/usr/bin/env python3
"""A memory system's write policy over wpb-agent/1: a language model decides, Mem0-style.

For every endpoint snapshot the stream shows, the model is asked whether the new fact is to be
added, is an update of a memory held about the same endpoint, makes one obsolete, or changes
nothing, and answers one line of JSON: ``{"event": "ADD"}``, ``{"event": "UPDATE", "id": T}``,
``{"event": "DELETE", "id": T}`` or ``{"event": "NONE"}`` (``T``: the memory's step). The
agent sends those events as they are (the protocol maps them onto WRITE, EXPIRE + WRITE,
EXPIRE and SKIP) and keeps within the budget itself: before writing, it expires the oldest
memories until the new one fits. Other steps (documentation, guides) are skipped.

The model is the hook: ``--model-command CMD [ARG...]`` (everything after it) is run once per
question with the prompt on its standard input and must print the answer on its standard
output: a local model's command line (llama.cpp's ``llama-cli``, say) or a script wrapping
one. ``memory_llm.fake_model.py`` beside this file is a stand-in that answers by rule, for the
tests. Only the standard library is used, so any Python 3 runs it.
"""

import json
import subprocess
import sys

HELP = "usage: memory_llm.py --model-command CMD [ARG...]"


def model_command(argv):
    if "--model-command" not in argv or argv.index("--model-command") == len(argv) - 1:
        sys.exit(HELP)
    return argv[argv.index("--model-command") + 1:]


def prompt(fact, related):
    lines = ["You manage a memory of API contracts. A new fact arrived:", json.dumps(fact, sort_keys=True),
             "Memories about the same endpoint (id: fact):"]
    lines += [f"{t}: {json.dumps(f, sort_keys=True)}" for t, f in related] or ["(none)"]
    lines.append('Answer one line of JSON: {"event": "ADD"}, {"event": "UPDATE", "id": ID}, '
                 '{"event": "DELETE", "id": ID} or {"event": "NONE"}.')
    return "\n".join(lines) + "\n"


def ask(command, text, known):
    done = subprocess.run(command, input=text, capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        sys.exit(f"memory_llm: the model command failed ({done.returncode}): {done.stderr.strip()[:200]}")
    for line in done.stdout.splitlines():  # the first line that is an answer; models chatter
        try:
            answer = json.loads(line)
        except ValueError:
            continue
        event = answer.get("event") if isinstance(answer, dict) else None
        target = answer.get("id") if isinstance(answer, dict) else None
        named = type(target) is int and target in known  # a memory the question listed, not 47.0 or [47]
        if event in ("ADD", "NONE") or (event in ("UPDATE", "DELETE") and named):
            return event, target
    return "NONE", None  # no usable answer: change nothing


def decide(step, command, facts):
    obs = step["observation"]
    if not isinstance(obs, dict) or "api" not in obs:
        return []
    memory = step["memory"]
    held = {t: facts[t] for t, _, _ in memory["items"] if t in facts}
    related = [(t, f) for t, f in held.items() if f.get("api") == obs["api"]]
    event, target = ask(command, prompt(obs, related), {t for t, _ in related})
    if event == "NONE":
        return [{"op": "NONE"}]
    if event == "DELETE":
        return [{"op": "DELETE", "target": target}]
    if step["bytes"] > memory["budget_bytes"]:
        return []
    actions, room = [], memory["budget_bytes"] - memory["bytes_used"]
    if event == "UPDATE":  # the old memory goes first, and its bytes with it
        room += next(b for t, b, _ in memory["items"] if t == target)
    for t, b, _ in memory["items"]:  # oldest first
        if room >= step["bytes"]:
            break
        if t != target:
            actions.append({"op": "EXPIRE", "target": t, "reason": "make room"})
            room += b
    last = {"op": "UPDATE", "target": target} if event == "UPDATE" else {"op": "ADD"}
    return actions + [last]


def main():
    command = model_command(sys.argv[1:])
    facts = {}  # t -> the fact shown then (memory is described by t only)
    for line in sys.stdin:
        message = json.loads(line)
        if message["type"] == "hello":
            reply = {"protocol": "wpb-agent/1"}
        elif message["type"] == "step":
            facts[message["t"]] = message["observation"]
            reply = {"actions": decide(message, command, facts)}
        else:
            if message["type"] == "episode":
                facts.clear()
            continue
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
