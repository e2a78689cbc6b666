"""One tool round trip through toolpilot with a Python client, as a user's program would.

Usage: python py_clients.py chat|responses|langchain BASE_URL
The client declares its own tool, `lookup_weather`; the mock model behind toolpilot first
calls `read_file` (toolpilot runs it: `server.augment`), then `lookup_weather` (the client
runs it here and sends the result back), then answers. Prints one JSON object for the Rust
test (tests/suite/clients.rs) to check.
"""

import json
import sys


def lookup_weather(city: str) -> str:
    return f"sunny in {city}"


SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
QUESTION = "What does hello.txt say, and what is the weather in Paris?"


def chat(base: str) -> dict:
    import openai
    from openai import OpenAI

    client = OpenAI(base_url=base, api_key="unused", max_retries=0)
    tools = [{"type": "function", "function": {
        "name": "lookup_weather", "description": "The weather in a city.", "parameters": SCHEMA}}]
    msgs = [{"role": "user", "content": QUESTION}]
    ran = []
    for _ in range(4):
        r = client.chat.completions.create(model="mock-model", messages=msgs, tools=tools)
        m = r.choices[0].message
        if not m.tool_calls:
            return {"version": openai.__version__, "answer": m.content, "ran": ran,
                    "finish": r.choices[0].finish_reason}
        msgs.append(m.model_dump(exclude_none=True))
        for tc in m.tool_calls:
            out = lookup_weather(**json.loads(tc.function.arguments))
            ran.append(out)
            msgs.append({"role": "tool", "tool_call_id": tc.id, "content": out})
    raise SystemExit("the conversation did not end")


def responses(base: str) -> dict:
    import openai
    from openai import OpenAI

    client = OpenAI(base_url=base, api_key="unused", max_retries=0)
    tools = [{"type": "function", "name": "lookup_weather",
              "description": "The weather in a city.", "parameters": SCHEMA}]
    ran = []
    text = ""
    final = None
    # Streamed, continued with previous_response_id, as the SDK's docs show.
    stream = client.responses.create(model="mock-model", input=QUESTION, tools=tools, stream=True)
    for _ in range(4):
        calls = []
        for event in stream:
            if event.type == "response.output_text.delta":
                text += event.delta
            elif event.type == "response.completed":
                final = event.response
                calls = [i for i in final.output if i.type == "function_call"]
        if not calls:
            return {"version": openai.__version__, "answer": text, "ran": ran,
                    "status": final.status if final else None}
        outputs = []
        for c in calls:
            out = lookup_weather(**json.loads(c.arguments))
            ran.append(out)
            outputs.append({"type": "function_call_output", "call_id": c.call_id, "output": out})
        stream = client.responses.create(model="mock-model", input=outputs, tools=tools,
                                         previous_response_id=final.id, stream=True)
    raise SystemExit("the conversation did not end")


def langchain(base: str) -> dict:
    from importlib.metadata import version

    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    @tool
    def lookup_weather_tool(city: str) -> str:
        """The weather in a city."""
        return lookup_weather(city)

    lookup_weather_tool.name = "lookup_weather"
    llm = ChatOpenAI(model="mock-model", base_url=base, api_key="unused", max_retries=0,
                     streaming=True).bind_tools([lookup_weather_tool])
    msgs = [HumanMessage(QUESTION)]
    ran = []
    for _ in range(4):
        ai = llm.invoke(msgs)
        msgs.append(ai)
        if not ai.tool_calls:
            return {"version": version("langchain-openai"), "answer": ai.content, "ran": ran}
        for tc in ai.tool_calls:
            out = lookup_weather_tool.invoke(tc["args"])
            ran.append(out)
            msgs.append(ToolMessage(out, tool_call_id=tc["id"]))
    raise SystemExit("the conversation did not end")


if __name__ == "__main__":
    mode, base = sys.argv[1], sys.argv[2]
    print(json.dumps({"chat": chat, "responses": responses, "langchain": langchain}[mode](base)))
