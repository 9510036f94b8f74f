// Runs the trajectory viewer's script (empo2.report.viewer_assets.JS) in Node against a minimal DOM
// and prints the rendered episode (#episode) as one line per element: "tag.class: text".
// Usage: node render_viewer.js viewer.html "#run=0&it=0&ep=0"
// Used by tests/report/test_report.py when Node is installed (the Chromium test renders the real page).
"use strict";
const fs = require("fs");

const [, , page, hash] = process.argv;
const html = fs.readFileSync(page, "utf8");
const data = html.match(/<script type="application\/json" id="viewer-data">([\s\S]*?)<\/script>/)[1];
const code = html.match(/<script>([\s\S]*?)<\/script>\s*<\/body>/)[1];

class Node {
  constructor(tag) { this.tag = tag; this.className = ""; this.children = []; this.text = ""; this.value = ""; }
  get firstChild() { return this.children[0] || null; }
  appendChild(c) { this.children.push(c); return c; }
  removeChild(c) { this.children.splice(this.children.indexOf(c), 1); return c; }
  set textContent(v) { this.text = String(v); this.children = []; }
  get textContent() { return this.text; }
  addEventListener() {}
  setAttribute(k, v) { this[k] = v; }
}
const byId = {};
for (const id of ["run", "iteration", "f-variation", "f-mode", "f-score", "note", "episodes", "episode"]) {
  byId[id] = new Node(id === "episode" ? "main" : "div");
}
byId["viewer-data"] = Object.assign(new Node("script"), { text: data });
global.document = {
  getElementById: (id) => byId[id],
  createElement: (tag) => new Node(tag),
  addEventListener() {},
  body: new Node("body"),
};
global.location = { hash: hash || "" };
global.history = { replaceState: (a, b, h) => { global.location.hash = h; } };
global.window = { addEventListener() {}, scrollTo() {} };
new Function(code)();

function dump(node, depth, out) {
  const label = node.tag + (node.className ? "." + node.className.split(" ").join(".") : "");
  out.push("  ".repeat(depth) + label + (node.text ? ": " + node.text.replace(/\n/g, " ") : ""));
  for (const c of node.children) dump(c, depth + 1, out);
  return out;
}
process.stdout.write(dump(byId["episode"], 0, []).join("\n") + "\n");
