// One tool round trip through toolpilot with the OpenAI Node SDK, for chat completions
// (streamed) and the Responses API (streamed, the whole conversation sent back as Codex does).
//
// Usage: node node_sdk.mjs BASE_URL
// The client declares its own tool, `lookup_weather`; the mock model behind toolpilot first
// calls `read_file` (toolpilot runs it: `server.augment`), then `lookup_weather` (run here and
// answered), then answers. Prints one JSON object for tests/suite/clients.rs.
import OpenAI from "openai";
import { readFileSync } from "node:fs";

const base = process.argv[2];
const client = new OpenAI({ baseURL: base, apiKey: "unused", maxRetries: 0 });
const lookupWeather = ({ city }) => `sunny in ${city}`;
const schema = { type: "object", properties: { city: { type: "string" } }, required: ["city"] };
const question = "What does hello.txt say, and what is the weather in Paris?";

async function chat() {
  const tools = [{ type: "function", function: { name: "lookup_weather", description: "The weather in a city.", parameters: schema } }];
  const messages = [{ role: "user", content: question }];
  const ran = [];
  for (let i = 0; i < 4; i++) {
    const stream = await client.chat.completions.create({ model: "mock-model", messages, tools, stream: true });
    let text = "";
    const calls = [];
    let finish = null;
    for await (const chunk of stream) {
      const choice = chunk.choices[0];
      if (!choice) continue;
      text += choice.delta?.content ?? "";
      for (const tc of choice.delta?.tool_calls ?? []) {
        const c = (calls[tc.index] ??= { id: "", name: "", arguments: "" });
        c.id ||= tc.id ?? "";
        c.name += tc.function?.name ?? "";
        c.arguments += tc.function?.arguments ?? "";
      }
      finish = choice.finish_reason ?? finish;
    }
    if (calls.length === 0) return { answer: text, ran, finish };
    messages.push({ role: "assistant", content: null, tool_calls: calls.map((c) => ({ id: c.id, type: "function", function: { name: c.name, arguments: c.arguments } })) });
    for (const c of calls) {
      const out = lookupWeather(JSON.parse(c.arguments));
      ran.push(out);
      messages.push({ role: "tool", tool_call_id: c.id, content: out });
    }
  }
  throw new Error("the chat conversation did not end");
}

async function responses() {
  const tools = [{ type: "function", name: "lookup_weather", description: "The weather in a city.", parameters: schema, strict: false }];
  const input = [{ role: "user", content: question }];
  const ran = [];
  for (let i = 0; i < 4; i++) {
    const stream = client.responses.stream({ model: "mock-model", input, tools, store: false });
    const final = await stream.finalResponse();
    const calls = final.output.filter((item) => item.type === "function_call");
    if (calls.length === 0) return { answer: final.output_text, ran, status: final.status };
    for (const c of calls) {
      const out = lookupWeather(JSON.parse(c.arguments));
      ran.push(out);
      input.push({ type: "function_call", call_id: c.call_id, name: c.name, arguments: c.arguments });
      input.push({ type: "function_call_output", call_id: c.call_id, output: out });
    }
  }
  throw new Error("the responses conversation did not end");
}

const version = JSON.parse(readFileSync(new URL("./node_modules/openai/package.json", import.meta.url))).version;
console.log(JSON.stringify({ version, chat: await chat(), responses: await responses() }));
