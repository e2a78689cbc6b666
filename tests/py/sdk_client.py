"""Drives toolpilot with the official `openai` Python SDK, as a user's program would.

Usage: python sdk_client.py BASE_URL
Prints one JSON object describing what the SDK saw; the Rust test checks it. The mock
upstream behind toolpilot is scripted by the test in the same order as the calls below.
"""

import json
import sys

import openai
from openai import OpenAI


def main() -> None:
    base = sys.argv[1]
    client = OpenAI(base_url=base, api_key="not-needed", max_retries=0)
    out = {"sdk_version": openai.__version__}
    msgs = [{"role": "user", "content": "What does a.txt say?"}]

    # 1. Non-streamed, with a server-side tool round behind it.
    r = client.chat.completions.create(model="mock-model", messages=msgs)
    out["nonstream"] = {
        "content": r.choices[0].message.content,
        "finish": r.choices[0].finish_reason,
        "total_tokens": r.usage.total_tokens,
        "object": r.object,
    }

    # 2. Streamed, with usage.
    parts, finish, usage, roles = [], None, None, []
    stream = client.chat.completions.create(
        model="mock-model",
        messages=msgs,
        stream=True,
        stream_options={"include_usage": True},
    )
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage.total_tokens
        for ch in chunk.choices:
            if ch.delta.role:
                roles.append(ch.delta.role)
            if ch.delta.content:
                parts.append(ch.delta.content)
            if ch.finish_reason:
                finish = ch.finish_reason
    out["stream"] = {"content": "".join(parts), "finish": finish, "total_tokens": usage,
                     "pieces": len(parts), "roles": roles}

    # 3. A client tool handed back, streamed, accumulated the way SDK users do.
    tools = [{"type": "function", "function": {
        "name": "deploy", "description": "deploy the app",
        "parameters": {"type": "object", "properties": {"env": {"type": "string"}}}}}]
    calls = {}
    finish = None
    for chunk in client.chat.completions.create(
            model="mock-model", messages=msgs, tools=tools, stream=True):
        for ch in chunk.choices:
            for tc in ch.delta.tool_calls or []:
                c = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
                if tc.id:
                    c["id"] = tc.id
                if tc.function and tc.function.name:
                    c["name"] += tc.function.name
                if tc.function and tc.function.arguments:
                    c["arguments"] += tc.function.arguments
            if ch.finish_reason:
                finish = ch.finish_reason
    out["client_tool"] = {"calls": [calls[i] for i in sorted(calls)], "finish": finish}

    # 4. The same, non-streamed, through the SDK's typed objects.
    r = client.chat.completions.create(model="mock-model", messages=msgs, tools=tools)
    tc = r.choices[0].message.tool_calls[0]
    out["client_tool_nonstream"] = {"id": tc.id, "name": tc.function.name,
                                    "arguments": json.loads(tc.function.arguments),
                                    "finish": r.choices[0].finish_reason}

    # 5. A validation error becomes the SDK's typed exception.
    try:
        client.chat.completions.create(model="mock-model", messages=[])
        out["bad_request"] = None
    except openai.BadRequestError as e:
        out["bad_request"] = {"status": e.status_code, "message": e.message}

    # 6. An upstream error in the middle of a stream raises in the SDK.
    try:
        for _ in client.chat.completions.create(model="mock-model", messages=msgs, stream=True):
            pass
        out["stream_error"] = None
    except openai.APIError as e:
        out["stream_error"] = {"message": e.message}

    # 7. Raw response: the run id header.
    raw = client.chat.completions.with_raw_response.create(model="mock-model", messages=msgs)
    out["run_id"] = raw.headers.get("x-toolpilot-run-id")
    out["raw_content"] = raw.parse().choices[0].message.content

    # 8. Models.
    out["models"] = [m.id for m in client.models.list()]

    print(json.dumps(out))


if __name__ == "__main__":
    main()
