// Vercel's AI SDK against a gateway, for tests/clients/test_aisdk_media.py:
// run by node with the pinned packages in .venv/clients/aisdk (its own
// environment, tests/clients/aisdk/package-lock.json), never the project's.
//
// Usage: node aisdk_run.mjs SPEC, SPEC a JSON object: `modules` (the
// directory holding node_modules), `base_url` (the gateway's, ending /v1),
// `api_key`, `prompt`, `files` (a list of {data: base64, media_type,
// filename}) and `runs`, a list of {id, provider, model}, `provider` one of
// `openai` (the Responses API, the provider's default), `openai-chat`
// (Chat Completions), `openai-compatible` (Chat Completions) and `anthropic`
// (Messages). Each run is one generateText with one user message: the
// prompt, then each file as a `file` part (bytes, its media type and
// filename). It prints one JSON object, run id -> {text} or {error}, with
// `sent`, the request bodies the provider posted (seen through its `fetch`).

import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

const spec = JSON.parse(process.argv[2]);
const require = createRequire(`${spec.modules}/package.json`);
const load = (name) => import(pathToFileURL(require.resolve(name)).href);

const { generateText } = await load("ai");
const { createOpenAI } = await load("@ai-sdk/openai");
const { createOpenAICompatible } = await load("@ai-sdk/openai-compatible");
const { createAnthropic } = await load("@ai-sdk/anthropic");

function recording(sent) {
  return async (url, init) => {
    sent.push({ url: String(url), body: JSON.parse(init.body) });
    return fetch(url, init);
  };
}

function modelOf(run, sent) {
  const common = { baseURL: spec.base_url, apiKey: spec.api_key, fetch: recording(sent) };
  switch (run.provider) {
    case "openai":
      return createOpenAI(common).responses(run.model);
    case "openai-chat":
      return createOpenAI(common).chat(run.model);
    case "openai-compatible":
      return createOpenAICompatible({ ...common, name: "flatgate" }).chatModel(run.model);
    case "anthropic":
      return createAnthropic(common)(run.model);
    default:
      throw new Error(`unknown provider ${run.provider}`);
  }
}

const content = [
  { type: "text", text: spec.prompt },
  ...spec.files.map((f) => ({
    type: "file",
    data: Buffer.from(f.data, "base64"),
    mediaType: f.media_type,
    filename: f.filename,
  })),
];

const report = {};
for (const run of spec.runs) {
  const sent = [];
  try {
    const result = await generateText({
      model: modelOf(run, sent),
      maxRetries: 0,
      messages: [{ role: "user", content }],
    });
    report[run.id] = { text: result.text, sent };
  } catch (error) {
    report[run.id] = {
      error: { name: error.name, message: String(error.message), status: error.statusCode },
      sent,
    };
  }
}
console.log(JSON.stringify(report));
