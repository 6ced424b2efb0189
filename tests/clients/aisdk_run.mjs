// Vercel's AI SDK against a gateway, for tests/clients/test_aisdk_*.py:
// run by node with the pinned packages in .venv/clients/aisdk (its own
// environment, tests/clients/aisdk/package-lock.json), never the project's.
//
// Usage: node aisdk_run.mjs SPEC, SPEC a JSON object: `modules` (the
// directory holding node_modules), `base_url` (the gateway's, ending /v1),
// `api_key`, `prompt`, `files` (a list of {data: base64, media_type,
// filename}) and `runs`, a list of {id, provider, model}, `provider` one of
// `openai` (the Responses API, the provider's default), `openai-chat`
// (Chat Completions), `openai-compatible` (Chat Completions), `anthropic`
// (Messages) and `google` (the Gemini API: `base_url` then ends /v1beta, as
// Google's own). Each run is one generateText with one user message: the
// prompt, then each file as a `file` part (bytes, its media type and
// filename). A run with `tool: true` is instead one streamText with the
// prompt alone and one tool, `lookup` ({q: string}), that the model must call
// (`toolChoice` names it): the agent loop's first step, streamed. A run with
// `embed`, a list of texts, is instead one embedMany of them with the
// provider's embedding model (`google` only). It prints one JSON object, run
// id -> {text, tool_calls}, {embeddings} or {error}, with `sent`, the
// request bodies the provider posted and the x-flatgate-dropped-fields
// header of each answer (seen through its `fetch`).

import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

const spec = JSON.parse(process.argv[2]);
const require = createRequire(`${spec.modules}/package.json`);
const load = (name) => import(pathToFileURL(require.resolve(name)).href);

const { embedMany, generateText, streamText, jsonSchema, tool } = await load("ai");
const { createOpenAI } = await load("@ai-sdk/openai");
const { createOpenAICompatible } = await load("@ai-sdk/openai-compatible");
const { createAnthropic } = await load("@ai-sdk/anthropic");
const { createGoogleGenerativeAI } = await load("@ai-sdk/google");

function recording(sent) {
  return async (url, init) => {
    const response = await fetch(url, init);
    const dropped = response.headers.get("x-flatgate-dropped-fields");
    sent.push({ url: String(url), body: JSON.parse(init.body), dropped });
    return response;
  };
}

function embeddingModelOf(run, sent) {
  const common = { baseURL: spec.base_url, apiKey: spec.api_key, fetch: recording(sent) };
  if (run.provider !== "google") throw new Error(`no embedding model for ${run.provider}`);
  return createGoogleGenerativeAI(common).embeddingModel(run.model);
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
    case "google":
      return createGoogleGenerativeAI(common)(run.model);
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

const lookup = tool({
  description: "look a word up",
  inputSchema: jsonSchema({
    type: "object",
    properties: { q: { type: "string" } },
    required: ["q"],
    additionalProperties: false,
  }),
});

async function streamedToolCall(model) {
  const errors = [];
  const result = streamText({
    model,
    maxRetries: 0,
    prompt: spec.prompt,
    tools: { lookup },
    toolChoice: { type: "tool", toolName: "lookup" },
    onError: ({ error }) => errors.push(error),
  });
  const text = await result.text;
  if (errors.length) throw errors[0];
  const calls = await result.toolCalls;
  return { text, tool_calls: calls.map((c) => ({ name: c.toolName, input: c.input })) };
}

const report = {};
for (const run of spec.runs) {
  const sent = [];
  try {
    if (run.embed) {
      const model = embeddingModelOf(run, sent);
      const { embeddings } = await embedMany({ model, maxRetries: 0, values: run.embed });
      report[run.id] = { embeddings, sent };
      continue;
    }
    const model = modelOf(run, sent);
    if (run.tool) {
      report[run.id] = { ...(await streamedToolCall(model)), sent };
      continue;
    }
    const result = await generateText({
      model,
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
