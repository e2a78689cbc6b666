"""Broken upstream streams through toolpilot, as the official `openai` Python SDK sees them.

Usage: python sdk_broken.py BASE_URL SHAPES
For each of SHAPES broken-stream shapes (scripted by the Rust test, four rounds each, in this
order): a streamed chat completion, a non-streamed one, a Responses stream read through the
SDK's `responses.stream()` helper, and a non-streamed Responses request. Prints one JSON list,
one object per shape, saying what the SDK raised for each (or that it did not).
"""

import json
import sys

import openai
from openai import OpenAI


def raised(fn):
    """What `fn` raised: its class and message, or None if it returned."""
    try:
        fn()
        return None
    except openai.APIStatusError as e:
        return {"class": type(e).__name__, "status": e.status_code, "message": e.message}
    except (openai.APIError, RuntimeError) as e:
        return {"class": type(e).__name__, "message": str(e)}


def main() -> None:
    client = OpenAI(base_url=sys.argv[1], api_key="not-needed", max_retries=0)
    msgs = [{"role": "user", "content": "x"}]
    out = []
    for _ in range(int(sys.argv[2])):
        shape = {}
        text = []

        def chat_stream():
            for chunk in client.chat.completions.create(model="mock-model", messages=msgs, stream=True):
                for ch in chunk.choices:
                    text.append(ch.delta.content or "")

        shape["chat_stream"] = raised(chat_stream)
        shape["chat_stream_text"] = "".join(text)
        shape["chat"] = raised(lambda: client.chat.completions.create(model="mock-model", messages=msgs))
        events = []

        def responses_stream():
            with client.responses.stream(model="mock-model", input="x") as stream:
                for event in stream:
                    events.append(event.type)
                stream.get_final_response()

        shape["responses_stream"] = raised(responses_stream)
        shape["responses_stream_last_event"] = events[-1] if events else None
        shape["responses"] = raised(lambda: client.responses.create(model="mock-model", input="x"))
        out.append(shape)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
