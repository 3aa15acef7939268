#!/usr/bin/env node
// last_kb in JavaScript, over the wpb-agent/1 protocol (docs/agent-protocol.md): write every
// step, first expiring the oldest items until it fits; skip a step larger than the whole budget.
// It decides what the Python baseline `last_kb` decides, step for step.
"use strict";
const readline = require("readline");

const input = readline.createInterface({ input: process.stdin, terminal: false });
const say = (message) => process.stdout.write(JSON.stringify(message) + "\n");

function decide(step) {
  const memory = step.memory;
  if (step.bytes > memory.budget_bytes) return []; // never fits: keep what is held
  let room = memory.budget_bytes - memory.bytes_used;
  const actions = [];
  for (const [t, bytes] of memory.items) { // oldest first
    if (room >= step.bytes) break;
    actions.push({ op: "EXPIRE", target: t, reason: "make room (oldest first)" });
    room += bytes;
  }
  actions.push({ op: "WRITE", reason: "recency" });
  return actions;
}

input.on("line", (text) => {
  const message = JSON.parse(text);
  if (message.type === "hello") say({ protocol: "wpb-agent/1" });
  else if (message.type === "step") say({ actions: decide(message) });
  // "episode" and "end" need no answer
});
