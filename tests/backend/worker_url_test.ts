import assert from "node:assert/strict";
import { nodeWorkerUrl } from "../../backend/cpu/_worker_url.ts";

Deno.test("nodeWorkerUrl() returns a file: URL itself, so a checkout starts its Worker as before", () => {
  const url = new URL("../../backend/cpu/comm_worker.ts", import.meta.url);
  assert.equal(nodeWorkerUrl(url), url);
});

Deno.test("nodeWorkerUrl() wraps an https URL in a data: module that imports it statically", async () => {
  const url = new URL("https://jsr.io/@dcomm/dcomm/0.1.0/backend/cpu/comm_worker.ts?v=a%20b#frag");
  const wrapped = nodeWorkerUrl(url);
  assert.equal(wrapped.protocol, "data:");
  // What the Worker evaluates: the data: URL's body, decoded as a fetch of it decodes it.
  const code = await (await fetch(wrapped)).text();
  assert.equal(code, `import ${JSON.stringify(url.href)};`);
  assert.match(wrapped.href, /^data:text\/javascript,import "https:\/\/jsr\.io\//);
});
