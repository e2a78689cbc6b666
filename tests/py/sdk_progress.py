"""Streams one request with the official openai SDK and reports, per delta kind, what a client
sees: the answer text, the reasoning text, and whether a delta ever mixed text and tool calls.
Usage: sdk_progress.py BASE_URL"""
import json
import sys

from openai import OpenAI

client = OpenAI(base_url=sys.argv[1], api_key="unused", max_retries=0)
content, reasoning, mixed = "", "", False
for chunk in client.chat.completions.create(
    model="mock-model",
    messages=[{"role": "user", "content": "read a.txt"}],
    stream=True,
):
    if not chunk.choices:
        continue
    delta = chunk.choices[0].delta
    text = delta.content or ""
    # Not in the SDK's schema: kept as an extra field, as clients that show thinking read it.
    thought = getattr(delta, "reasoning_content", None) or ""
    if text and delta.tool_calls:
        mixed = True
    content += text
    reasoning += thought
print(json.dumps({"content": content, "reasoning": reasoning, "mixed": mixed}))
